package holds

import "time"

// Body is a hold as the HTTP API shows it.
type Body struct {
	ID             string `json:"id"`
	Key            string `json:"key"`
	Feature        string `json:"feature"`
	Cycle          string `json:"cycle"`
	Amount         int64  `json:"amount"`
	Used           int64  `json:"used"`
	Status         Status `json:"status"`
	LeaseExpiresAt string `json:"leaseExpiresAt"`
	CreatedAt      string `json:"createdAt"`
	Charged        *int64 `json:"charged,omitempty"`
	Released       *int64 `json:"released,omitempty"`
	SettledAt      string `json:"settledAt,omitempty"`
}

// BodyOf is h as the HTTP API shows it.
func BodyOf(h Hold) Body {
	b := Body{
		ID: h.ID, Key: h.Key, Feature: h.Feature, Cycle: h.Cycle, Amount: h.Amount, Used: h.Used,
		Status: h.Status, LeaseExpiresAt: rfc3339(h.LeaseExpiresAtMs), CreatedAt: rfc3339(h.CreatedAtMs),
	}
	if h.Status.Final() {
		charged, released := h.Charged, h.Released
		b.Charged, b.Released, b.SettledAt = &charged, &released, rfc3339(h.SettledAtMs)
	}
	return b
}

// rfc3339 formats epoch milliseconds as the API's RFC 3339 UTC time.
func rfc3339(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }
