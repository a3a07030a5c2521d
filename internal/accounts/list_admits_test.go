package accounts_test

import (
	"encoding/base64"
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts"
)

// A linked account is on a list exactly when the list's prefix and cursor would have it there.
func TestListInput_Admits(t *testing.T) {
	after := func(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }
	for _, tc := range []struct {
		in   accounts.ListInput
		id   string
		want bool
	}{
		{accounts.ListInput{Limit: 1}, "acct_b", true},
		{accounts.ListInput{Prefix: "acct_", Limit: 1}, "acct_b", true},
		{accounts.ListInput{Prefix: "acct_c", Limit: 1}, "acct_b", false},
		{accounts.ListInput{Cursor: after("acct_a"), Limit: 1}, "acct_b", true},
		{accounts.ListInput{Cursor: after("acct_b"), Limit: 1}, "acct_b", false},
		{accounts.ListInput{Cursor: after("acct_c"), Limit: 1}, "acct_b", false},
	} {
		if err := tc.in.Validate(); err != nil {
			t.Fatalf("%+v: %v", tc.in, err)
		}
		if got := tc.in.Admits(tc.id); got != tc.want {
			t.Errorf("%+v admits %s: %v, want %v", tc.in, tc.id, got, tc.want)
		}
	}
}
