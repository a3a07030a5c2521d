package problem

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestKinds_EveryKindHasAName(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		name := k.String()
		if name == "" || seen[name] {
			t.Errorf("kind %d: name %q is empty or shared", int(k), name)
		}
		seen[name] = true
	}
	if Kinds()[0] != Internal {
		t.Error("the zero kind must be Internal: an unclassified error is Ferry's fault")
	}
}

func TestDescribe(t *testing.T) {
	errBusy := New(Unavailable, "busy", "Retry it.")
	errLarge := New(TooLarge, "too large", "")
	cases := []struct {
		name string
		err  error
		kind Kind
		want Public
	}{
		{"an unclassified error is internal", errors.New("disk on fire"), Internal, Public{}},
		{"a wrapped sentinel keeps its kind and its detail", fmt.Errorf("reserve: %w", errBusy), Unavailable, Public{Detail: "Retry it."}},
		{"a sentinel without a detail tells the whole message", fmt.Errorf("%w: the body is over 10 bytes", errLarge), TooLarge, Public{Detail: "too large: the body is over 10 bytes"}},
		{"input refused as a whole", Input("the body is not valid JSON"), Invalid, Public{Detail: "the body is not valid JSON"}},
		{"input refused field by field lists every problem", Fields([]string{"a is required", "b is too long"}), Invalid,
			Public{Detail: "a is required; b is too long", Facts: map[string]any{"errors": []string{"a is required", "b is too long"}}}},
	}
	for _, c := range cases {
		kind, pub := Describe(c.err)
		if c.kind == Internal {
			pub = Public{}
		}
		if kind != c.kind || !reflect.DeepEqual(pub, c.want) {
			t.Errorf("%s: %v %+v, want %v %+v", c.name, kind, pub, c.kind, c.want)
		}
	}
	if Fields(nil) != nil {
		t.Error("Fields(nil) is not nil: a Validate with no problems must return a nil error")
	}
	if !errors.Is(fmt.Errorf("x: %w", errBusy), errBusy) {
		t.Error("a sentinel is not found by errors.Is")
	}
}
