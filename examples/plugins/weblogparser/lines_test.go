package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// genLines returns n access-log lines in time order, about malformed of
// them malformed, from a fixed seed: a few hundred paths and clients, a
// handful of statuses, several hours.
func genLines(n int, malformed float64, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, 1))
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.FixedZone("", -7*3600))
	statuses := []string{"200", "200", "200", "304", "404", "500", "301"}
	methods := []string{"GET", "GET", "GET", "POST", "HEAD"}
	out := make([][]byte, n)
	for i := range out {
		t := start.Add(time.Duration(i) * 4 * time.Hour / time.Duration(max(n, 1)))
		ip := fmt.Sprintf("10.%d.%d.%d", r.IntN(4), r.IntN(16), r.IntN(8))
		path := fmt.Sprintf("/section%d/page%d.html", r.IntN(10), r.IntN(40))
		if r.IntN(5) == 0 {
			path += "?q=" + fmt.Sprint(r.IntN(100))
		}
		size := fmt.Sprint(r.IntN(50000))
		if r.IntN(20) == 0 {
			size = "-"
		}
		line := fmt.Sprintf(`%s - - [%s] "%s %s HTTP/1.1" %s %s "-" "bench/1.0"`,
			ip, t.Format("02/Jan/2006:15:04:05 -0700"), methods[r.IntN(len(methods))], path,
			statuses[r.IntN(len(statuses))], size)
		if r.Float64() < malformed {
			switch r.IntN(3) {
			case 0:
				line = line[:len(line)/2]
			case 1:
				line = "garbage " + line
			default:
				line = fmt.Sprintf(`%s - - [%s] "GET %s HTTP/1.1" 2x0 12`, ip, t.Format("02/Jan/2006:15:04:05 -0700"), path)
			}
		}
		out[i] = []byte(line)
	}
	return out
}
