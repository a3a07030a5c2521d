package console_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/ferrymeter/ferry/internal/alerts/notify"
)

// The registration form offers every kind Ferry sends, and only those.
func TestConsole_OffersEveryNotificationKind(t *testing.T) {
	js, err := os.ReadFile("assets/console.js")
	if err != nil {
		t.Fatal(err)
	}
	list := regexp.MustCompile(`(?s)const notificationKinds = \[(.*?)\];`).FindSubmatch(js)
	if list == nil {
		t.Fatal("console.js declares no notificationKinds")
	}
	var got []string
	for _, m := range regexp.MustCompile(`"([^"]+)"`).FindAllSubmatch(list[1], -1) {
		got = append(got, string(m[1]))
	}
	var want []string
	for _, k := range notify.Kinds {
		want = append(want, string(k))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the console offers %v; Ferry sends %v", got, want)
	}
}
