// Package badgerutil holds what every flowrun package that opens Badger
// needs, so the fix lives in one place.
//
// Today that is RemoveEmptyLogFiles: a kill -9 at the wrong moment leaves an
// empty value-log or memtable file that Badger v4 then refuses to open, and
// an empty file holds no data, so it is removed before badger.Open. The
// runtime's store calls it on every open, and badgerq.OpenDB through
// RepairBeforeOpen; the kill -9 tests are what found it. Both do it under
// LockDir, Badger's own lock (a flock on the directory), so that a running
// DB's log file, empty for the instant of its creation, is never taken for
// a crash's leftover.
package badgerutil
