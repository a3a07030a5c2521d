package ingest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/meter"
)

func envs(n, size int) []event.Envelope {
	out := make([]event.Envelope, n)
	for i := range out {
		out[i] = event.Envelope{AccountID: "a", EventID: fmt.Sprint(i), ReceivedAtMs: 1, Event: []byte(`"` + strings.Repeat("x", size-2) + `"`)}
	}
	return out
}

func sizes(ps []event.Packed) []int {
	var out []int
	for _, p := range ps {
		out = append(out, len(p.Events))
	}
	return out
}

func eventsOnly(env event.Envelope) []meter.Reading {
	rs, _ := meter.Set{}.Read(meter.Event{ID: env.EventID, ReceivedAtMs: env.ReceivedAtMs})
	return rs
}

// Packs split a batch evenly under the event bound, and by bytes so a packed body fits SQS.
func TestPacks_EvenUnderTheBoundsInOrder(t *testing.T) {
	for _, tc := range []struct {
		n, size int
		want    string
	}{
		{1, 10, "[1]"},
		{95, 10, "[95]"},
		{97, 10, "[49 48]"}, // 97 entries, the rows item and the events meter's 4 items are 102
		{98, 10, "[49 49]"},
		{100, 10, "[50 50]"},
		{197, 10, "[66 66 65]"},
		{10, 60 << 10, "[3 3 3 1]"}, // 60 KiB events: three fit in 191 KiB
	} {
		ps := Packs(envs(tc.n, tc.size), eventsOnly)
		if got := fmt.Sprint(sizes(ps)); got != tc.want {
			t.Errorf("%d events of %d bytes: packs %s, want %s", tc.n, tc.size, got, tc.want)
		}
		for _, p := range ps {
			body, err := event.EncodePacked(p)
			if err != nil || len(body) > maxBatchPayload {
				t.Errorf("a pack's body is %d bytes (%v); SQS takes %d", len(body), err, maxBatchPayload)
			}
		}
	}
}
