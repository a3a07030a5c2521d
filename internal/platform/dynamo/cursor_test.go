package dynamo_test

import (
	"encoding/base64"
	"testing"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

func TestTimeCursor_ReadsWhatItWroteAndNothingElse(t *testing.T) {
	c := dynamo.NewTimeCursor(`hold_[a-z2-7]{3}`)
	atMs, id, err := c.Decode(c.Encode(1764590400000, "hold_abc"))
	if err != nil || atMs != 1764590400000 || id != "hold_abc" {
		t.Fatalf("round trip: %d %q %v", atMs, id, err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	for _, bad := range []string{"", "%%%", enc([]byte("12#hold_ABC")), enc([]byte("#hold_abc")), enc([]byte("12345678901234567#hold_abc")), enc([]byte("12#hold_abc#x")), enc([]byte("12#evt_1"))} {
		if _, _, err := c.Decode(bad); !problem.IsInvalid(err) {
			t.Errorf("Decode(%q) = %v; want an input error", bad, err)
		}
	}
}
