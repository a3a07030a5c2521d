package dynamo

import "strings"

// Guard is one clause of a condition expression that Ferry's safety argument rests on, named so
// that a test can remove it at the wire and show that something breaks without it. Each adapter
// lists its own (Guards in ledger, usage, holds, ratelimit, idempotency and accounts); the
// guard-ablation table is their union.
type Guard struct {
	// Name is the guard's stable name: "<package>.<write>.<what it keeps>".
	Name string
	// Kind is the write the condition rides on: "Put", "Update" or "Delete" (alone or as an
	// item of TransactWriteItems).
	Kind string
	// Table is the logical name of the table written.
	Table string
	// Update, for an Update, is the update expression that identifies the write (two writes
	// share one condition: the billing checkpoint and the rejection); empty matches any.
	Update string
	// UpdatePrefix, for an Update whose expression is built per request, is how it begins.
	UpdatePrefix string
	// SortKeyPrefix, when set, is the prefix of the item's "sk" that identifies the write (a
	// hold and its steps share a table and a condition).
	SortKeyPrefix string
	// KeyPrefix, when set, is the prefix of the item's "pk" that identifies the write (a batch's
	// record shares the ledger and the first-writer condition with the entries).
	KeyPrefix string
	// Clause is the guard: a top-level conjunct of the condition sent, or the whole condition.
	// A "%s" in it stands for any attribute name (a condition built from a template, one per
	// kind of link).
	Clause string
	// Keeps says, in a sentence, what breaks without it.
	Keeps string
}

// Clauses splits a condition expression into its top-level conjuncts (outside parentheses).
// An expression with a top-level OR is one clause.
func Clauses(cond string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(cond); i++ {
		switch cond[i] {
		case '(':
			depth++
		case ')':
			depth--
		}
		if depth == 0 && strings.HasPrefix(cond[i:], " OR ") {
			return []string{strings.TrimSpace(cond)}
		}
		if depth == 0 && strings.HasPrefix(cond[i:], " AND ") {
			parts = append(parts, strings.TrimSpace(cond[start:i]))
			start = i + len(" AND ")
			i += len(" AND ") - 1
		}
	}
	return append(parts, strings.TrimSpace(cond[start:]))
}

// HasClause reports whether the condition expression carries clause, whole or as a top-level conjunct.
func HasClause(cond, clause string) bool {
	if ClauseIs(strings.TrimSpace(cond), clause) {
		return true
	}
	for _, c := range Clauses(cond) {
		if ClauseIs(c, clause) {
			return true
		}
	}
	return false
}

// ClauseIs reports whether c is clause, where a "%s" in clause stands for any attribute name. A
// clause conjoined with others is written in parentheses when it holds an OR; the parentheses
// around the whole of c do not count.
func ClauseIs(c, clause string) bool {
	if u := unwrap(c); u != c && clauseIs(u, clause) {
		return true
	}
	return clauseIs(c, clause)
}

func clauseIs(c, clause string) bool {
	before, after, template := strings.Cut(clause, "%s")
	if !template {
		return c == clause
	}
	if !strings.HasPrefix(c, before) || !strings.HasSuffix(c, after) || len(c) <= len(before)+len(after) {
		return false
	}
	for _, b := range []byte(c[len(before) : len(c)-len(after)]) {
		if !isNameByte(b) {
			return false
		}
	}
	return true
}

// Without is the condition expression with clause removed: "" when nothing is left.
func Without(cond, clause string) string {
	if ClauseIs(strings.TrimSpace(cond), clause) {
		return ""
	}
	var kept []string
	for _, c := range Clauses(cond) {
		if !ClauseIs(c, clause) {
			kept = append(kept, c)
		}
	}
	return strings.Join(kept, " AND ")
}

// unwrap is c without one pair of parentheses around the whole of it.
func unwrap(c string) string {
	if !strings.HasPrefix(c, "(") || !strings.HasSuffix(c, ")") {
		return c
	}
	depth := 0
	for i := 0; i < len(c); i++ {
		switch c[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 && i < len(c)-1 {
				return c // "(a) OR (b)": the first pair closes before the end
			}
		}
	}
	return strings.TrimSpace(c[1 : len(c)-1])
}
