// Package binenc reads and writes the little-endian varint encodings that
// flowrun's logs, queue values and envelopes share.
//
// A Reader walks a byte slice with a sticky error: the first read that fails
// (the buffer ends, a varint is malformed, a length or count is more than the
// rest of the buffer can hold) records the Reader's error and every later
// read returns a zero value, so a decoder reads a whole record and checks
// Err once. Counts are checked against the bytes left, so a corrupt length
// cannot make a decoder allocate gigabytes.
package binenc
