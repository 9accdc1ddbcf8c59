// Package suggest finds the likely intended word for a typo: the planner
// and flowlet.Config use it for "did you mean" hints on field and type names.
package suggest
