package lab_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/operator/lab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The labs run against any Ferry by its base URL and operator key; against a fresh one, both
// come out as the write-up's scenario says they should, and print their table.
func TestLabs_AgainstAFerry_ComeOutAsExpected(t *testing.T) {
	h := apptest.New(t)
	cfg := lab.Config{BaseURL: h.Server.URL, OperatorKey: apptest.AdminKey}
	five, err := lab.HoldsFive(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A small load: room for 10 jobs of 1,000, 12 jobs, 4 at a time.
	load, err := lab.HoldsLoad(context.Background(), cfg, lab.LoadParams{Jobs: 12, Estimate: 1_000, Limit: 10_000, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []lab.Result{five, load} {
		if !res.OK() || res.Err() != nil {
			t.Errorf("%s: %v (failures %v)", res.Lab, res.Problems, res.Failures)
		}
		var out bytes.Buffer
		res.Print(&out)
		if !strings.Contains(out.String(), "seed (Earmark)") || !strings.Contains(out.String(), "OK: Ferry's outcome is the expected one.") {
			t.Errorf("%s printed:\n%s", res.Lab, out.String())
		}
	}
	if five.Rows[2].Name != "holds: admitted" || five.Rows[2].Ferry != "2" {
		t.Errorf("holds-five admitted row %+v, want 2 admitted", five.Rows[2])
	}
	if load.Rows[0].Ferry != "10" || load.Rows[1].Ferry != "2" {
		t.Errorf("holds-load admitted %s, refused %s; want 10 and 2", load.Rows[0].Ferry, load.Rows[1].Ferry)
	}
}

// The reconcile lab against a Ferry reporting to stand-ins (mounted at /standin/kinde as ferry
// dev mounts them) comes out as seed 000's scenario says.
func TestLabReconcile_AgainstAFerry_ComesOutAsTheSeedSays(t *testing.T) {
	stand := apptest.NewStandIns(t, plans.Default())
	h := apptest.New(t, apptest.Options{Settings: stand.Settings})
	target, err := url.Parse(h.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(devstack.KindeStandInPath+"/", http.StripPrefix(devstack.KindeStandInPath, stand.Kinde))
	mux.Handle("/", httputil.NewSingleHostReverseProxy(target))
	front := httptest.NewServer(mux)
	defer front.Close()

	res, err := lab.Reconcile(context.Background(), lab.Config{BaseURL: front.URL, OperatorKey: apptest.AdminKey})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res.Print(&out)
	if !res.OK() || res.Err() != nil {
		t.Fatalf("%v (failures %v)\n%s", res.Problems, res.Failures, out.String())
	}
	for _, want := range []string{"seed (Notch)", "under_billed", "8,457", "OK: Ferry's outcome is the expected one."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the lab printed no %q:\n%s", want, out.String())
		}
	}
}
