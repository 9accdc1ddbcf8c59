package flowlets

// Results is the app side of the results JSON the independent verifier
// compares (examples/weblog/README.md, "Results JSON format"): what export
// writes from the app's state. The verifier keeps its own copy on purpose.
type Results struct {
	PageViews    map[string]int64 `json:"page_views"`
	Visitors     map[string]int64 `json:"visitors"`
	StatusCounts map[string]int64 `json:"status_counts"`
	BytesPerHour map[string]int64 `json:"bytes_per_hour"`
	LinesPerHour map[string]int64 `json:"lines_per_hour"`
	Malformed    int64            `json:"malformed"`
}

// NewResults returns Results with empty, non-nil maps (the format wants {}).
func NewResults() *Results {
	return &Results{PageViews: map[string]int64{}, Visitors: map[string]int64{},
		StatusCounts: map[string]int64{}, BytesPerHour: map[string]int64{}, LinesPerHour: map[string]int64{}}
}
