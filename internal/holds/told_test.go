package holds

import (
	"fmt"
	"testing"
)

// The memo of told notifications is bounded: it remembers up to maxToldMemo ids, and the next
// one starts it again, empty (a forgotten id costs one write that finds its notification there).
func TestToldMemo_BoundedAtTenThousand_ThenStartsAgain(t *testing.T) {
	if maxToldMemo != 10_000 {
		t.Fatalf("maxToldMemo = %d; want 10,000", maxToldMemo)
	}
	var m toldMemo
	if m.has("ntf_a") {
		t.Fatal("the zero memo remembers something")
	}
	for i := range maxToldMemo {
		m.add(fmt.Sprintf("ntf_%d", i))
	}
	if !m.has("ntf_0") || !m.has(fmt.Sprintf("ntf_%d", maxToldMemo-1)) {
		t.Fatal("a full memo forgot what it was told")
	}
	m.add("ntf_next")
	if m.has("ntf_0") || !m.has("ntf_next") || len(m.ids) != 1 {
		t.Errorf("past its bound the memo holds %d ids; want only the newest", len(m.ids))
	}
}
