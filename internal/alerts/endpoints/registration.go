package endpoints

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/alerts/send"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// Registration is what the operator registers an endpoint with.
type Registration struct {
	// URL is where deliveries go: https (see send.CheckURL).
	URL string
	// Kinds are the notification kinds it wants (empty: every kind); Accounts the accounts
	// (empty: every account, including those created later).
	Kinds    []string
	Accounts []string
	// Description is the operator's note (optional).
	Description string
}

// Validate returns every problem of the registration under policy at once (a
// *problem.InputError), or nil.
func (r Registration) Validate(policy send.Policy) error {
	var problems []string
	if r.URL == "" {
		problems = append(problems, "url is required")
	} else {
		problems = append(problems, urlProblems(r.URL, policy)...)
	}
	problems = append(problems, kindsProblems(r.Kinds)...)
	problems = append(problems, accountsProblems(r.Accounts)...)
	problems = append(problems, descriptionProblems(r.Description)...)
	return problem.Fields(problems)
}

// endpoint is the new endpoint the registration makes, with its id and first secret. The
// lists are copied as given: order and spelling are the operator's.
func (r Registration) endpoint(id, secret string, nowMs int64) Endpoint {
	return Endpoint{
		ID: id, URL: r.URL, Kinds: list(r.Kinds), Accounts: list(r.Accounts), Description: r.Description,
		Secrets:     []Secret{{Value: secret, CreatedAtMs: nowMs}},
		CreatedAtMs: nowMs, UpdatedAtMs: nowMs, Rev: 1,
	}
}

// Patch changes some of an endpoint's fields; a nil field is left as it is. An empty list sets
// "every kind" or "every account"; an empty description removes it.
type Patch struct {
	URL         *string
	Kinds       *[]string
	Accounts    *[]string
	Description *string
	Disabled    *bool
}

// Validate returns every problem of the patch under policy at once (a *problem.InputError), or
// nil. A patch that sets nothing is refused: it is almost always a misspelt request.
func (p Patch) Validate(policy send.Policy) error {
	var problems []string
	if p.URL == nil && p.Kinds == nil && p.Accounts == nil && p.Description == nil && p.Disabled == nil {
		problems = append(problems, "the change sets nothing; send at least one of url, kinds, accounts, description, disabled")
	}
	if p.URL != nil {
		if *p.URL == "" {
			problems = append(problems, "url is empty; send the endpoint's URL")
		} else {
			problems = append(problems, urlProblems(*p.URL, policy)...)
		}
	}
	if p.Kinds != nil {
		problems = append(problems, kindsProblems(*p.Kinds)...)
	}
	if p.Accounts != nil {
		problems = append(problems, accountsProblems(*p.Accounts)...)
	}
	if p.Description != nil {
		problems = append(problems, descriptionProblems(*p.Description)...)
	}
	return problem.Fields(problems)
}

// applyTo is e with the patch's fields set, as written at nowMs. Secrets are e's: a patch never
// touches them.
func (p Patch) applyTo(e Endpoint, nowMs int64) Endpoint {
	next := e
	if p.URL != nil {
		next.URL = *p.URL
	}
	if p.Kinds != nil {
		next.Kinds = list(*p.Kinds)
	}
	if p.Accounts != nil {
		next.Accounts = list(*p.Accounts)
	}
	if p.Description != nil {
		next.Description = *p.Description
	}
	if p.Disabled != nil {
		next.Disabled = *p.Disabled
	}
	next.UpdatedAtMs = nowMs
	return next
}

// Rotated is e after a rotation at nowMs to secret: the new secret current, the one it replaces
// expiring RotationOverlap later, and nothing older (an endpoint signs with at most
// send.MaxSecrets secrets).
func Rotated(e Endpoint, secret string, nowMs int64) Endpoint {
	next := e
	next.Secrets = []Secret{{Value: secret, CreatedAtMs: nowMs}}
	for _, s := range e.Secrets {
		if s.ExpiresAtMs == 0 {
			s.ExpiresAtMs = nowMs + RotationOverlap.Milliseconds()
			next.Secrets = append(next.Secrets, s)
			break
		}
	}
	next.UpdatedAtMs = nowMs
	return next
}

// list is a copy of l, nil when it is empty: "every kind" and "every account" are stored as
// no attribute, and read back as nil.
func list(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	return slices.Clone(l)
}

// urlProblems are CheckURL's, named as the url field's.
func urlProblems(raw string, policy send.Policy) []string {
	var out []string
	for _, p := range send.CheckURL(raw, policy) {
		out = append(out, "url "+p)
	}
	return out
}

// kindsProblems names every kind that is not one Ferry sends, and every repeat.
func kindsProblems(kinds []string) []string {
	if len(kinds) > maxListedKinds {
		return []string{fmt.Sprintf("kinds lists %d kinds; Ferry sends %d (%s), each listed at most once", len(kinds), len(notify.Kinds), knownKinds())}
	}
	var out []string
	for i, k := range kinds {
		switch {
		case !notify.KnownKind(k):
			out = append(out, fmt.Sprintf("kinds[%d] %q is not a kind Ferry sends (%s)", i, k, knownKinds()))
		case slices.Index(kinds, k) < i:
			out = append(out, fmt.Sprintf("kinds[%d] repeats %q", i, k))
		}
	}
	return out
}

// accountsProblems names every entry that is not an account id, every repeat, and a list over
// MaxAccounts. The accounts need not exist yet: an endpoint may be registered before them.
func accountsProblems(ids []string) []string {
	if len(ids) > MaxAccounts {
		return []string{fmt.Sprintf("accounts lists %d accounts; at most %d (leave it empty for every account)", len(ids), MaxAccounts)}
	}
	var out []string
	for i, id := range ids {
		switch {
		case !accounts.ValidID(id):
			out = append(out, fmt.Sprintf("accounts[%d] %q is not an account id (1–64 letters, digits, _ or -, starting with a letter or digit)", i, id))
		case slices.Index(ids, id) < i:
			out = append(out, fmt.Sprintf("accounts[%d] repeats %q", i, id))
		}
	}
	return out
}

// descriptionProblems bounds a description's length.
func descriptionProblems(d string) []string {
	if n := utf8.RuneCountInString(d); n > MaxDescriptionChars {
		return []string{fmt.Sprintf("description is %d characters long; at most %d", n, MaxDescriptionChars)}
	}
	return nil
}

func knownKinds() string {
	names := make([]string, len(notify.Kinds))
	for i, k := range notify.Kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}
