package apptest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// Every event fixture is what the library type reads and writes: it decodes into
// aws-lambda-go's type with no field the type does not know (a misspelt field fails here), and
// encoding and decoding it again gives back the same value, so nothing in it is lost on the way.
func TestFixtures_RoundTripThroughTheLibraryTypes(t *testing.T) {
	kinds := map[string]func() any{
		"sqs":   func() any { return new(events.SQSEvent) },
		"apigw": func() any { return new(events.APIGatewayV2HTTPRequest) },
	}
	for dir, newValue := range kinds {
		files, err := filepath.Glob(filepath.Join(TestdataDir(), dir, "*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no fixtures under testdata/%s: %v", dir, err)
		}
		for _, file := range files {
			t.Run(dir+"/"+filepath.Base(file), func(t *testing.T) {
				raw, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				v := newValue()
				dec := json.NewDecoder(bytes.NewReader(raw))
				dec.DisallowUnknownFields()
				if err := dec.Decode(v); err != nil {
					t.Fatalf("not a %T: %v", v, err)
				}
				again, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				back := newValue()
				if err := json.Unmarshal(again, back); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(v, back) {
					t.Errorf("the fixture does not survive a round trip:\n got %s\nfrom %s", again, raw)
				}
			})
		}
	}
}
