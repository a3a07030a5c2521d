package dynamo

import (
	"encoding/base64"
	"regexp"
	"strconv"

	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// TimeCursor reads and writes the cursor of a list ordered by an index's time sort key: the
// position of a page's last item as "<ms>#<id>", base64url-encoded. It names no partition: the
// query's own (the caller's account and status) is always used, so a cursor cannot reach outside
// what the caller may list.
type TimeCursor struct{ pattern *regexp.Regexp }

// NewTimeCursor returns the cursor of items whose ids match idPattern (a regular expression
// without anchors).
func NewTimeCursor(idPattern string) TimeCursor {
	return TimeCursor{pattern: regexp.MustCompile(`^([0-9]{1,16})#(` + idPattern + `)$`)}
}

// Encode is the cursor of the item with id at atMs.
func (c TimeCursor) Encode(atMs int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(atMs, 10) + "#" + id))
}

// Decode reads a cursor Encode wrote; anything else is an input error.
func (c TimeCursor) Decode(cursor string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	m := c.pattern.FindSubmatch(raw)
	if err != nil || m == nil {
		return 0, "", problem.Input("cursor is not one this API returned")
	}
	atMs, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		return 0, "", problem.Input("cursor is not one this API returned")
	}
	return atMs, string(m[2]), nil
}
