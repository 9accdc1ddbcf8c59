// Package crashtest holds what the kill -9 tests share. A crash test's child
// appends a line to an acknowledgement file once a commit is durable; the
// test then checks that every acknowledged commit survived.
package crashtest
