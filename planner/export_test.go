package planner

// For the external fuzz target over the registered built-in types.
var (
	CheckErrorList = checkErrorList
	CheckPlan      = checkPlan
)
