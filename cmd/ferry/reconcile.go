package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"

	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
)

// maxReconcilePages bounds one `ferry reconcile` over every account (50 accounts a page).
const maxReconcilePages = 10_000

// runReconcile reconciles one account (and cycle), or every account page by page, and prints one
// line per (account, feature, cycle, provider). It fails when a cycle could not be compared or a
// repair was not confirmed.
func runReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := operatorClient(fs)
	account := fs.String("account", "", "reconcile this account only (default: every account, 50 a page)")
	cycleLabel := fs.String("cycle", "", "the cycle, YYYY-MM (default: the current one, and for Stripe the one that just closed)")
	asJSON := fs.Bool("json", false, "print the results as JSON lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := newOpClient(*base)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "account\tfeature\tcycle\tprovider\tledger\tsent\tmeter\tverdict\trepair\tread back\tconfirmed\tnew evidence")
	}
	failed := 0
	var notes []string
	after, accounts, cycles := "", 0, 0
	for page := 1; page <= maxReconcilePages; page++ {
		body := map[string]any{}
		if *account != "" {
			body["account"] = *account
		}
		if *cycleLabel != "" {
			body["cycle"] = *cycleLabel
		}
		if after != "" {
			body["after"] = after
		}
		var out struct {
			Results  []reconcile.Result `json:"results"`
			Accounts int                `json:"accounts"`
			Next     string             `json:"next"`
			OK       bool               `json:"ok"`
		}
		if err := c.call(ctx, http.MethodPost, "/v1/reconcile", body, &out); err != nil {
			return err
		}
		accounts += out.Accounts
		cycles += len(out.Results)
		for _, res := range out.Results {
			if res.Error != "" {
				failed++
			}
			for _, ch := range res.Checks {
				if ch.Error != "" {
					failed++
				}
				if *asJSON {
					line, _ := json.Marshal(map[string]any{"account": res.Account, "feature": res.Feature, "cycle": res.Cycle, "check": ch})
					fmt.Fprintln(stdout, string(line))
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%v\t%v\n", res.Account, res.Feature, res.Cycle, ch.Provider,
					ch.Ledger, ch.Sent, opt(ch.Meter), ch.Verdict, opt(ch.Repair), opt(ch.ReadBack), ch.Confirmed, ch.NewEvidence)
				who := fmt.Sprintf("%s %s %s %s", res.Account, res.Feature, res.Cycle, ch.Provider)
				if ch.Verdict != reconcile.Match {
					notes = append(notes, fmt.Sprintf("%s: %s: %s", who, ch.Verdict, ch.Cause))
				}
				if ch.Error != "" {
					notes = append(notes, fmt.Sprintf("%s: error: %s", who, ch.Error))
				}
			}
			if res.Error != "" && len(res.Checks) == 0 {
				notes = append(notes, fmt.Sprintf("%s %s %s: error: %s", res.Account, res.Feature, res.Cycle, res.Error))
			}
		}
		fmt.Fprintf(stderr, "page %d: %d accounts, %d cycles reconciled so far\n", page, accounts, cycles)
		if out.Next == "" {
			break
		}
		after = out.Next
	}
	if !*asJSON {
		_ = tw.Flush()
		if len(notes) > 0 {
			fmt.Fprintln(stdout)
			for _, n := range notes {
				fmt.Fprintln(stdout, n)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d checks were not proven or not repaired: see above", failed)
	}
	return nil
}

func opt(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// runReport runs the reporter (and the drainer) now.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := operatorClient(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var out json.RawMessage
	if err := newOpClient(*base).call(ctx, http.MethodPost, "/v1/report", map[string]any{}, &out); err != nil {
		return err
	}
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, out, "", "  ")
	fmt.Fprintln(stdout, pretty.String())
	return nil
}

// runEvidence prints the stored evidence of an account's cycle.
func runEvidence(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("evidence", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := operatorClient(fs)
	account := fs.String("account", "", "the account (required)")
	cycleLabel := fs.String("cycle", "", "the cycle, YYYY-MM (default: the account's current one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *account == "" {
		return errors.New("--account is required")
	}
	q := url.Values{"account": {*account}}
	if *cycleLabel != "" {
		q.Set("cycle", *cycleLabel)
	}
	var out struct {
		Account  string `json:"account"`
		Cycle    string `json:"cycle"`
		Evidence []struct {
			Feature, Provider, Verdict, Cause, At string
			Ledger, Sent                          int64
			Meter, Repair, ReadBack               *int64
			Confirmed                             bool
		} `json:"evidence"`
	}
	if err := newOpClient(*base).call(ctx, http.MethodGet, "/v1/reconcile/evidence?"+q.Encode(), nil, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Evidence for %s, cycle %s:\n\n", out.Account, out.Cycle)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "at\tfeature\tprovider\tledger\tsent\tmeter\tverdict\trepair\tread back\tconfirmed\tcause")
	for _, e := range out.Evidence {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%v\t%s\n", e.At, e.Feature, e.Provider, e.Ledger, e.Sent,
			opt(e.Meter), e.Verdict, opt(e.Repair), opt(e.ReadBack), e.Confirmed, e.Cause)
	}
	return tw.Flush()
}
