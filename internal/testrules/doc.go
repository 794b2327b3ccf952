// Package testrules holds checks over the project's own test files, run by
// go test like any test: rules that keep the suite passing on any date and
// failing fast instead of hanging. See rules_test.go for the rules.
package testrules
