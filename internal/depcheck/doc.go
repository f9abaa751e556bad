// Package depcheck holds no code: its test enforces the direction of imports
// between Regina's packages (docs/ARCHITECTURE.md), so that a forbidden edge
// fails the build's tests instead of waiting for a review.
package depcheck
