package planner

import (
	"strconv"

	"github.com/flowrun/flowrun/internal/suggest"
)

// didYouMean returns `; did you mean "x"?` for the candidate closest to
// word, or "" when nothing is close enough to be a plausible typo.
func didYouMean(word string, candidates []string) string {
	if best := closest(word, candidates); best != "" {
		return "; did you mean " + strconv.Quote(best) + "?"
	}
	return ""
}

func closest(word string, candidates []string) string { return suggest.Closest(word, candidates) }
