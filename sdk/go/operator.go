package ferry

import (
	"context"
	"iter"
	"net/http"
	"net/url"
)

// The operator's routes: they take the operator key as Config.APIKey.

// CreateAccount creates an account and returns it with its API key, shown this once.
func (c *Client) CreateAccount(ctx context.Context, req CreateAccountRequest) (*AccountWithKey, error) {
	var out AccountWithKey
	if err := c.mutate(ctx, http.MethodPost, "/v1/accounts", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ThresholdPercent is an account's threshold at a share of a feature's limit, 1 to 100: for
// CreateAccountRequest.Alerts and UpdateAccountRequest.Alerts, e.g.
// ferry.Alerts{"events": {ferry.ThresholdPercent(80), ferry.ThresholdValue(500)}}.
func ThresholdPercent(percent int) Threshold {
	var t Threshold
	// Encoding a struct of one int cannot fail.
	_ = t.FromThreshold0(Threshold0{Percent: percent})
	return t
}

// ThresholdValue is an account's threshold at an absolute usage of a feature (at least 1).
func ThresholdValue(value int) Threshold {
	var t Threshold
	_ = t.FromThreshold1(Threshold1{Value: value})
	return t
}

// GetAccount reads an account (never its key).
func (c *Client) GetAccount(ctx context.Context, id string) (*Account, error) {
	var out Account
	if err := c.get(ctx, "/v1/accounts/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateAccount changes an account's plan, status, limits, alerts, agreement start or linked
// ids. The request is sent as JSON (an UpdateAccountRequest, or a map that says exactly which
// members to send: a linked id's null unlinks it; a feature's empty list of alerts turns its
// thresholds off).
func (c *Client) UpdateAccount(ctx context.Context, id string, req any) (*Account, error) {
	var out Account
	if err := c.mutate(ctx, http.MethodPatch, "/v1/accounts/"+url.PathEscape(id), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Accounts iterates over the accounts in id order.
func (c *Client) Accounts(ctx context.Context, params ListAccountsParams) iter.Seq2[Account, error] {
	q := url.Values{}
	setQuery(q, "prefix", params.Prefix)
	setQuery(q, "linkedId", params.LinkedId)
	setQuery(q, "cursor", params.Cursor)
	setQuery(q, "limit", params.Limit)
	return pages[Account](ctx, c, "/v1/accounts", q)
}

// Standing reads an account's usage of every feature over its recent cycles.
func (c *Client) Standing(ctx context.Context, id string, params GetStandingParams) (map[string]any, error) {
	q := url.Values{}
	setQuery(q, "cycles", params.Cycles)
	var out map[string]any
	err := c.get(ctx, "/v1/accounts/"+url.PathEscape(id)+"/standing", q, &out)
	return out, err
}

// CreateCorrection appends a ± correction row to an account's usage. Its Idempotency-Key names
// the correction, so the retries of one call append it once.
func (c *Client) CreateCorrection(ctx context.Context, req CorrectionRequest) (*Correction, error) {
	var out Correction
	if err := c.mutate(ctx, http.MethodPost, "/v1/usage/corrections", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunReport runs the reporter now, then drains the Stripe outbox once.
func (c *Client) RunReport(ctx context.Context) (*ReportRun, error) {
	var out ReportRun
	if err := c.mutate(ctx, http.MethodPost, "/v1/report", struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reconcile reconciles one account (and cycle), or one page of every account.
func (c *Client) Reconcile(ctx context.Context, req ReconcileRequest) (*ReconcileRun, error) {
	var out ReconcileRun
	if err := c.mutate(ctx, http.MethodPost, "/v1/reconcile", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Evidence reads the stored reconciliation evidence of an account's cycle.
func (c *Client) Evidence(ctx context.Context, params GetEvidenceParams) (*EvidenceList, error) {
	q := url.Values{"account": {params.Account}}
	setQuery(q, "cycle", params.Cycle)
	var out EvidenceList
	if err := c.get(ctx, "/v1/reconcile/evidence", q, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Review reads the review list: what a person must settle with a provider.
func (c *Client) Review(ctx context.Context) (*ReviewList, error) {
	var out ReviewList
	if err := c.get(ctx, "/v1/reconcile/review", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Outbox reads an account's Stripe outbox rows of one cycle, grouped by state.
func (c *Client) Outbox(ctx context.Context, params GetOutboxParams) (map[string]any, error) {
	q := url.Values{"account": {params.Account}}
	setQuery(q, "cycle", params.Cycle)
	var out map[string]any
	err := c.get(ctx, "/v1/outbox", q, &out)
	return out, err
}

// RunLab runs one of the labs (holds-five, webhooks-nine, reconcile) against the stack.
func (c *Client) RunLab(ctx context.Context, lab string) (map[string]any, error) {
	var out map[string]any
	err := c.mutate(ctx, http.MethodPost, "/v1/labs/"+url.PathEscape(lab)+"/runs", struct{}{}, &out)
	return out, err
}

// Health reads whether every part of a local stack answers (ferry dev only).
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var out Health
	if err := c.get(ctx, "/healthz", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
