package suggest

import "strings"

// Closest returns the candidate with the smallest edit distance to word, if
// that distance is small: at most 2, and less than half the longer word, so
// that short unrelated words ("to" vs "key") are not suggested.
func Closest(word string, candidates []string) string {
	best, bestDist := "", -1
	lw := strings.ToLower(word)
	for _, c := range candidates {
		d := editDistance(lw, strings.ToLower(c))
		if d == 0 && c == word {
			continue
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist < 0 || bestDist > 2 || 2*bestDist >= max(len(word), len(best)) {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and adjacent transpositions ("stragety") each
// cost 1. Inputs are short field and flowlet names, so O(len²) is fine; long
// inputs are cut off because nobody typos a 100-character name.
func editDistance(a, b string) int {
	const limit = 64
	if len(a) > limit || len(b) > limit {
		if a == b {
			return 0
		}
		return limit
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
