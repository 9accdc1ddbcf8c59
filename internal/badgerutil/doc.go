// Package badgerutil holds what every flowrun package that opens Badger
// needs, so the fix lives in one place.
//
// Today that is RemoveEmptyLogFiles: a kill -9 at the wrong moment leaves an
// empty value-log or memtable file that Badger v4 then refuses to open, and
// an empty file holds no data, so it is removed before badger.Open. The
// runtime's store calls it on every open; the kill -9 tests are what found
// it.
package badgerutil
