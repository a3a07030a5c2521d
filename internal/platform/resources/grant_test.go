package resources

import (
	"strings"
	"testing"
)

func TestGrant_HandsOutOnlyWhatTheEntryGrants(t *testing.T) {
	fn := Function{
		Name:    "reader",
		Tables:  map[string]Access{TableLedger: Read, TableUsage: ReadWrite},
		Queues:  map[string]Access{QueueEvents: Send},
		Buckets: map[string]Access{BucketArchive: Read},
	}
	env := map[string]string{
		EnvVar(KindTable, TableLedger): "p-ledger", EnvVar(KindTable, TableUsage): "p-usage",
		EnvVar(KindQueue, QueueEvents): "https://q/events", EnvVar(KindBucket, BucketArchive): "p-archive",
	}
	g, err := GrantFromEnv(fn, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	ok := []struct {
		got  func() (string, error)
		want string
	}{
		{func() (string, error) { return g.Table(TableLedger, Read) }, "p-ledger"},
		{func() (string, error) { return g.Table(TableUsage, Read) }, "p-usage"},
		{func() (string, error) { return g.Table(TableUsage, ReadWrite) }, "p-usage"},
		{func() (string, error) { return g.QueueURL(QueueEvents, Send) }, "https://q/events"},
		{func() (string, error) { return g.Bucket(BucketArchive, Read) }, "p-archive"},
	}
	for _, c := range ok {
		if got, err := c.got(); got != c.want || err != nil {
			t.Errorf("got %q, %v; want %q", got, err, c.want)
		}
	}
	refused := []struct {
		got  func() (string, error)
		want string
	}{
		{func() (string, error) { return g.Table(TableHolds, Read) }, "function reader uses table holds (read), which its entry in resources.Functions does not grant"},
		{func() (string, error) { return g.Table(TableLedger, ReadWrite) }, "function reader uses table ledger for read-write, and its entry grants only read"},
		{func() (string, error) { return g.QueueURL(QueueEvents, Consume) }, "function reader uses queue events for consume, and its entry grants only send"},
		{func() (string, error) { return g.Bucket(BucketArchive, ReadWrite) }, "function reader uses bucket archive for read-write, and its entry grants only read"},
	}
	for _, c := range refused {
		if got, err := c.got(); err == nil || got != "" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %q, %v; want the error %q", got, err, c.want)
		}
	}
	if len(g.Names().Tables) != 2 || g.Names().Queues[QueueEvents+"-dlq"] != "" {
		t.Errorf("the grant names more than the entry grants: %+v", g.Names())
	}
}

// A function reads its own resources' names only, and a missing one is named at start.
func TestGrantFromEnv_NamesEveryMissingVariable(t *testing.T) {
	fn := Function{Name: "reader", Tables: map[string]Access{TableLedger: Read, TableUsage: Read}}
	_, err := GrantFromEnv(fn, func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "FERRY_TABLE_LEDGER, FERRY_TABLE_USAGE") {
		t.Errorf("err = %v", err)
	}
}
