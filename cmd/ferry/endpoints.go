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
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
)

// endpointsUsage is `ferry webhook-endpoints`'s help.
const endpointsUsage = `usage: ferry webhook-endpoints <command> [--url URL] [flags]

  create      register an endpoint: --endpoint-url URL [--kind K]... [--account ID]... [--description TEXT]
  list        every endpoint (never a secret's value)
  rotate      a new signing secret for --id; the old one signs for 24 hours more
  deliveries  the delivery log of --id, newest first [--limit N] [--cursor C]
  replay      send the delivery of --notification to --id again

--url is Ferry's base URL (default: the local stack); the operator key comes from FERRY_ADMIN_KEY.
--json prints the API's answer as it is. A secret is shown once, by create and rotate.`

// kindNames lists the notification kinds Ferry sends.
func kindNames() string {
	names := make([]string, len(notify.Kinds))
	for i, k := range notify.Kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// runWebhookEndpoints manages the webhook endpoints of a running stack through its operator
// routes (/v1/webhook-endpoints).
func runWebhookEndpoints(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, endpointsUsage)
		return nil
	}
	fs := flag.NewFlagSet("webhook-endpoints "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := operatorClient(fs)
	asJSON := fs.Bool("json", false, "print the API's answer as it is")
	var kinds, accounts repeatedFlag
	var endpointURL, description, id, notification, cursor *string
	var limit *int
	switch args[0] {
	case "create":
		endpointURL = fs.String("endpoint-url", "", "where deliveries go (https; http://127.0.0.1… under ferry dev)")
		fs.Var(&kinds, "kind", "a notification kind it wants ("+kindNames()+"); repeat it; none: every kind")
		fs.Var(&accounts, "account", "an account it is sent notifications of; repeat it; none: every account")
		description = fs.String("description", "", "a note for the operator")
	case "list":
	case "rotate", "deliveries", "replay":
		id = fs.String("id", "", "the endpoint's id (we_…)")
		if args[0] == "deliveries" {
			cursor = fs.String("cursor", "", "the next page's cursor, as the page before printed it")
			limit = fs.Int("limit", 0, "deliveries per page, 1 to 100 (default: the API's)")
		}
		if args[0] == "replay" {
			notification = fs.String("notification", "", "the notification's id (ntf_…), as the delivery log shows it")
		}
	default:
		return fmt.Errorf("unknown webhook-endpoints command %q (try ferry webhook-endpoints --help)", args[0])
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; try ferry webhook-endpoints --help)", fs.Arg(0))
	}
	if id != nil && *id == "" {
		return errors.New("--id is required")
	}
	c := newOpClient(*base)
	var out json.RawMessage
	switch args[0] {
	case "create":
		if *endpointURL == "" {
			return errors.New("--endpoint-url is required")
		}
		body := map[string]any{"url": *endpointURL}
		if len(kinds) > 0 {
			body["kinds"] = kinds
		}
		if len(accounts) > 0 {
			body["accounts"] = accounts
		}
		if *description != "" {
			body["description"] = *description
		}
		if err := c.send(ctx, http.MethodPost, "/v1/webhook-endpoints", body, &out, http.StatusCreated); err != nil {
			return err
		}
	case "list":
		if err := c.send(ctx, http.MethodGet, "/v1/webhook-endpoints", nil, &out, http.StatusOK); err != nil {
			return err
		}
	case "rotate":
		if err := c.send(ctx, http.MethodPost, "/v1/webhook-endpoints/"+url.PathEscape(*id)+"/rotate-secret", nil, &out, http.StatusOK); err != nil {
			return err
		}
	case "deliveries":
		q := url.Values{}
		if *cursor != "" {
			q.Set("cursor", *cursor)
		}
		if *limit != 0 {
			q.Set("limit", strconv.Itoa(*limit))
		}
		path := "/v1/webhook-endpoints/" + url.PathEscape(*id) + "/deliveries"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		if err := c.send(ctx, http.MethodGet, path, nil, &out, http.StatusOK); err != nil {
			return err
		}
	case "replay":
		if *notification == "" {
			return errors.New("--notification is required")
		}
		path := "/v1/webhook-endpoints/" + url.PathEscape(*id) + "/deliveries/" + url.PathEscape(*notification) + "/replay"
		if err := c.send(ctx, http.MethodPost, path, nil, &out, http.StatusAccepted); err != nil {
			return err
		}
	}
	if *asJSON {
		var indented bytes.Buffer
		if err := json.Indent(&indented, out, "", "  "); err != nil {
			return err
		}
		fmt.Fprintln(stdout, indented.String())
		return nil
	}
	return printEndpointsAnswer(stdout, args[0], out)
}

// repeatedFlag collects a flag given more than once, each value as given (the API judges it).
type repeatedFlag []string

func (l *repeatedFlag) String() string     { return strings.Join(*l, ",") }
func (l *repeatedFlag) Set(v string) error { *l = append(*l, v); return nil }

// endpointAnswer is an endpoint as the API shows it, with a secret when create or rotate shows
// one.
type endpointAnswer struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	Kinds       []string `json:"kinds"`
	Accounts    []string `json:"accounts"`
	Description *string  `json:"description"`
	Disabled    bool     `json:"disabled"`
	Secrets     []struct {
		CreatedAt string  `json:"createdAt"`
		ExpiresAt *string `json:"expiresAt"`
	} `json:"secrets"`
	CreatedAt               string  `json:"createdAt"`
	Secret                  string  `json:"secret"`
	PreviousSecretExpiresAt *string `json:"previousSecretExpiresAt"`
}

type deliveryAnswer struct {
	Notification  string `json:"notification"`
	Kind          string `json:"kind"`
	Account       string `json:"account"`
	Status        string `json:"status"`
	Attempts      int    `json:"attempts"`
	LastStatus    int    `json:"lastStatus"`
	LastError     string `json:"lastError"`
	NextAttemptAt string `json:"nextAttemptAt"`
	DeliveredAt   string `json:"deliveredAt"`
	Replays       int    `json:"replays"`
}

// printEndpointsAnswer prints an answer for a person: an endpoint's lines, or a table.
func printEndpointsAnswer(w io.Writer, command string, data json.RawMessage) error {
	switch command {
	case "create", "rotate":
		var e endpointAnswer
		if err := json.Unmarshal(data, &e); err != nil {
			return err
		}
		printEndpoint(w, e)
		fmt.Fprintf(w, "\nsecret: %s\n", e.Secret)
		fmt.Fprintln(w, "  Shown once: store it with the receiver now. Verify deliveries with a Standard Webhooks library (docs/alerts.md).")
		if e.PreviousSecretExpiresAt != nil {
			fmt.Fprintf(w, "  The previous secret signs too until %s.\n", *e.PreviousSecretExpiresAt)
		}
	case "list":
		var page struct{ Items []endpointAnswer }
		if err := json.Unmarshal(data, &page); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "id\turl\tkinds\taccounts\tdisabled\tsecrets\tcreated")
		for _, e := range page.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%d\t%s\n", e.ID, e.URL, every(e.Kinds, "every kind"), every(e.Accounts, "every account"),
				e.Disabled, len(e.Secrets), e.CreatedAt)
		}
		return tw.Flush()
	case "deliveries":
		var page struct {
			Items []deliveryAnswer
			Next  *string
		}
		if err := json.Unmarshal(data, &page); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "notification\tkind\taccount\tstatus\tattempts\tlast status\tlast error\tnext attempt\tdelivered\treplays")
		for _, d := range page.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\n", d.Notification, d.Kind, d.Account, d.Status, d.Attempts,
				dash(statusText(d.LastStatus)), dash(d.LastError), dash(d.NextAttemptAt), dash(d.DeliveredAt), d.Replays)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if page.Next != nil {
			fmt.Fprintf(w, "more: --cursor %s\n", *page.Next)
		}
	case "replay":
		var d deliveryAnswer
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s is %s again; the notifier sends it on its next run (replay %d).\n", d.Notification, d.Status, d.Replays)
	}
	return nil
}

func printEndpoint(w io.Writer, e endpointAnswer) {
	fmt.Fprintf(w, "id:        %s\nurl:       %s\nkinds:     %s\naccounts:  %s\n", e.ID, e.URL, every(e.Kinds, "every kind"), every(e.Accounts, "every account"))
	if e.Description != nil {
		fmt.Fprintf(w, "note:      %s\n", *e.Description)
	}
	if e.Disabled {
		fmt.Fprintln(w, "disabled:  true")
	}
}

// every is a list, or what an empty one means.
func every(l []string, empty string) string {
	if len(l) == 0 {
		return empty
	}
	return strings.Join(l, ",")
}

// dash is s, or "-" for nothing.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func statusText(status int) string {
	if status == 0 {
		return ""
	}
	return strconv.Itoa(status)
}
