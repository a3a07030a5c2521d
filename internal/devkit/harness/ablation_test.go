package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/harness"
	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
)

// harnessAblations are the guards the harness's pipelines need: with each removed at the wire,
// the harness must find a broken invariant within its budget of schedules (seeds 0, 1, …). The
// run is deterministic, so the seed that finds it is the same on every run.
var harnessAblations = []struct {
	guard    string
	pipeline string
	budget   int
}{
	// A unit's claim, its meter write and its mark, for single-event messages and packed ones.
	{"ledger.claim.first-writer", "events", 100},
	{"ledger.takeover.unbilled", "events", 100},
	{"ledger.mark.inserting", "events", 100},
	{"usage.consume.cap", "events", 100},
	{"ledger.claim.first-writer", "events-batch", 100},
	{"ledger.mark.inserting", "events-batch", 100},
	{"usage.consume.cap", "events-batch", 100},
	// Units racing near a threshold: without the alert condition, two that each cross nothing
	// from what they read step over it together and no one tells it, unless a later claim that
	// refuses an event decides it (so the budget is larger: 7 of the first 600 schedules break,
	// the first at seed 119).
	{"usage.consume.alert-below", "events", 300},
	{"usage.hold.cap", "holds", 100},
	{"usage.hold.cap-room", "holds", 100},
	{"ratelimit.take.room", "holds", 300},
	{"holds.reserve.absent", "holds", 100},
	{"holds.charge.rev", "holds", 100},
	{"holds.settle.rev", "holds", 100},
	{"idempotency.claim.absent", "idempotency", 100},
	{"idempotency.takeover.expired", "idempotency", 200},
	{"idempotency.complete.token", "idempotency", 200},
	{"idempotency.release.token", "idempotency", 300},
	// A meter write after a report took its row's mark off lands unmarked without the check:
	// the ledger moves and Stripe never hears of it.
	{"usage.mark.present", "reporter", 100},
	// A drainer whose claim lapsed records its failure over the row another drainer sent since.
	{"outbox.rewrite.rev", "reporter", 100},
	// The webhook inbox: copies of one delivery, a transaction cancelled by a conflict before a
	// copy counts, workers racing for one event, grants of one cycle racing each other and
	// admissions, plan and status changes racing older ones, an operator unlinking a customer.
	{"inbox.insert.first", "inbox", 100},
	{"inbox.copy.exists", "inbox", 100},
	{"inbox.transition.rev", "inbox", 100},
	{"allowance.head.first", "inbox", 100},
	{"allowance.head.rev", "inbox", 100},
	{"accounts.billing.plan-newer", "inbox", 200},
	{"accounts.billing.status-newer", "inbox", 200},
	{"accounts.billing.linked", "inbox", 200},
}

// storeAblations are the guards no pipeline of the harness reaches (an operator's redrive, a row
// refused after another delivery finished the event, a claim that lands already expired, the
// account writes): a test named TestGuard_… in the adapter's package runs the scenario that needs
// each, with the guard and without it (testenv.NeedsGuard).
var storeAblations = map[string]string{
	// A take-over from a stale read of an entry another unit rejected since: the events
	// schedules take entries over, but two units racing for one entry claimed alone where one
	// rejects it needs the limit to move between their reads.
	"ledger.takeover.inserting": "internal/metering/ledger TestGuard_ATakeOverOfAnEntryRejectedSince_IsCancelled",
	// A consume over the whole limit: a unit's plan admits only what the budget row had room
	// for, so no claim sends one (the per-event billing did, one event at a limit of 0);
	// ConsumeCapped's own promise needs it.
	"usage.consume.cap-room": "internal/metering/usage TestGuard_AConsumeOverTheWholeLimitIsRefused",
	// The webhook endpoints and the notifier's deliveries: no pipeline of the harness registers
	// endpoints or sends notifications; each package's test races the writes each guard keeps.
	"endpoints.create.absent":       "internal/alerts/endpoints TestGuard_ARegistrationNeverReplacesAnEndpoint",
	"endpoints.rewrite.rev":         "internal/alerts/endpoints TestGuard_TwoRotationsOfOneRead_OnlyTheFirstLands",
	"drain.delivery.put.absent":     "internal/alerts/drain TestGuard_AFanOutRunAgainNeverResetsADelivery",
	"drain.delivery.rewrite.rev":    "internal/alerts/drain TestGuard_TwoNotifiersNeverBothClaimOneAttempt",
	"drain.notification.fanned.new": "internal/alerts/drain TestGuard_AStaleFanOutNeverOverwritesWhomANotificationWentTo",
	// A collision of two random session tokens cannot be provoked through sign-in; the store is
	// given one hash twice.
	"session.put.new":               "internal/operator/session TestGuard_ASessionIsNeverReplaced",
	"ledger.quarantine.inserting":   "internal/metering/ledger TestGuard_QuarantineOfAFinishedEvent_ChangesNothing",
	"ledger.uninsertable.inserting": "internal/metering/ledger TestGuard_UninsertableOfAFinishedEvent_ChangesNothing",
	"ledger.reopen.uninsertable":    "internal/metering/ledger TestGuard_ReopenOfAnInsertedEvent_IsRefused",
	// A unit's done record keeps the instant its entries were shown INSERTED, which no harness
	// invariant reads: with the guard removed, 200 events-batch schedules keep every invariant,
	// so the ledger's own test is what needs it.
	"ledger.batch-done.first":                     "internal/metering/ledger TestGuard_ABatchIsRecordedDoneOnce_ItsInstantStays",
	"idempotency.takeover.token":                  "internal/platform/idempotency TestGuard_TakeoverReplacesOnlyTheClaimItRead",
	"accounts.create.absent":                      "internal/accounts TestGuard_CreateNeverOverwritesAnAccount",
	"accounts.link.absent":                        "internal/accounts TestGuard_ALinkNamesOneAccount",
	"accounts.update.exists":                      "internal/accounts TestGuard_UpdateNeverCreatesAnAccount",
	"accounts.update.agreement-open":              "internal/accounts TestGuard_AgreementDayIsFixedByTheFirstUsage",
	"accounts.update.kindeCustomerId.was-absent":  "internal/accounts TestGuard_LinksAreChangedOnlyFromWhatWasRead",
	"accounts.update.kindeCustomerId.unchanged":   "internal/accounts TestGuard_LinksAreChangedOnlyFromWhatWasRead",
	"accounts.update.stripeCustomerId.was-absent": "internal/accounts TestGuard_LinksAreChangedOnlyFromWhatWasRead",
	"accounts.update.stripeCustomerId.unchanged":  "internal/accounts TestGuard_LinksAreChangedOnlyFromWhatWasRead",
	"accounts.update.kindeAgreementId.was-absent": "internal/accounts TestGuard_LinksAreChangedOnlyFromWhatWasRead",
	"accounts.update.kindeAgreementId.unchanged":  "internal/accounts TestGuard_LinksAreChangedOnlyFromWhatWasRead",
	// The usage rows' mark clearing and rebuilds, corrections, the reconciler and the review
	// list: no harness pipeline runs them under faults (the reporter pipeline's reconciler runs
	// once, quiet, at the end). The reporter's lease (claim, release), the outbox's insert and
	// the cancellations' lastSent are defence in depth the reporter pipeline does not single
	// out: with each removed, 200 reporter schedules keep every invariant, because report.sent.prev
	// (a lapsed or shared lease), the identifier (a row written twice is the same event, which
	// Stripe counts once) and no over-billing repair in the pipeline cover them; their packages'
	// tests run the windows they close.
	"usage.mark-clear.rev":    "internal/metering/usage TestGuard_AWriteAfterTheReadKeepsItsMark",
	"usage.mark-clear.fresh":  "internal/metering/usage TestGuard_AFirstWriteAfterTheReadKeepsItsMark",
	"usage.rebuild.rev":       "internal/metering/usage TestGuard_ARebuildLosesNoWriteMadeSinceItsRead",
	"usage.rebuild.fresh":     "internal/metering/usage TestGuard_ARebuildOfARowReadAbsentLosesNoFirstWrite",
	"usage.correction.absent": "internal/metering/usage TestGuard_ACorrectionIsWrittenOnce",
	// Meters: a MAX or LATEST figure replaced from the row as read, a distinct value counted
	// once a cycle; the units that race for them are two claims planned from one read. (The
	// events-batch pipeline also finds usage.distinct.first, at seed 622, past the table's size.)
	"usage.set.rev":        "internal/metering/ledger TestGuard_AMaxPlannedFromAStaleRead_IsCancelled",
	"usage.set.fresh":      "internal/metering/ledger TestGuard_AMaxPlannedOnARowReadAbsent_IsCancelled",
	"usage.distinct.first": "internal/metering/ledger TestGuard_ADistinctValueCountsOncePerCycle",
	// Corrections are an operator's requests, which no harness pipeline makes.
	"usage.correction-head.rev":   "internal/metering/usage TestGuard_TwoCorrectionsOnOneReadOfTheTotals_OnlyOneCommits",
	"usage.correction-head.fresh": "internal/metering/usage TestGuard_TheFirstTwoCorrectionsOfACycle_OnlyOneCommits",
	"report.claim.lease-free":     "internal/reporting/report TestGuard_OneRunAtATimeReportsACycle",
	"report.release.owner":        "internal/reporting/report TestGuard_ALapsedRunNeverFreesTheNextRunsLease",
	// The reporter pipeline needs it too (seed 120: two runs on one lastSent over-bill Stripe,
	// 5 for a ledger of 3), but past the 122 schedules that takes the ablation table's CI size.
	"report.sent.prev":          "internal/reporting/report TestGuard_TwoDeltasFromOneLastSent_OnlyOneCommits",
	"report.cancelled.prev":     "internal/reporting/report TestGuard_CancellationsLowerLastSentOnlyFromWhatTheyRead",
	"outbox.insert.absent":      "internal/reporting/outbox TestGuard_OneIdentifierIsOneRow",
	"reconcile.evidence.absent": "internal/reporting/reconcile TestGuard_EvidenceIsRecordedOnce",
	"reconcile.request-done.at": "internal/reporting/reconcile TestGuard_ARequestMadeAgainAfterTheReadStays",
	"review.add.absent":         "internal/reporting/review TestGuard_AnEntryIsListedOnce",
	// A MAX or LATEST rollup planned from a read another claim has overtaken: two plans of one
	// read, the larger committed first.
	"rollup.set.rev": "internal/metering/rollup TestGuard_AMaxPlannedFromAStaleReadNeverLowersIt",
	"rollup.set.new": "internal/metering/rollup TestGuard_AMaxPlannedFromAnAbsentItemNeverLowersIt",
}

// testAblations are guards that tests of their package need as they are: run with the guards
// removed at the wire (FERRY_ABLATE, comma-separated), the named test must fail.
var testAblations = []struct{ guards, target string }{
	// The inbox pipeline runs no reconciler, which is what clears a meter mark.
	{"inbox.meter-mark.clear-rev", "./internal/webhooks/inbox TestMeterUsage_MarksTheCycleForTheReconciler"},
	// A grant-only or mark-only effect reads the account in the step before its commit, and the
	// harness's unlinks landed in that one step in none of 300 inbox schedules with the guard
	// removed; the package's test unlinks the customer there.
	{"accounts.billing-check.linked", "./internal/webhooks/inbox TestWorker_GrantOnlyPaymentForAnUnlinkedCustomer_Ignored"},
	// The harness's operator only unlinks; it never sets a plan or a status. The package's tests
	// set one between a billing event's read and its commit, where a change not held to the value
	// it was decided from tells a stale "from".
	{"accounts.billing.plan-as-read", "./internal/webhooks/inbox TestNotify_OperatorChangeBetweenReadAndCommit_FromIsTheValueReplaced"},
	{"accounts.billing.status-as-read", "./internal/webhooks/inbox TestNotify_OperatorChangeBetweenReadAndCommit_FromIsTheValueReplaced"},
	// The recorded concurrent histories stop being linearizable without the guards they rest on.
	{"idempotency.claim.absent", "./internal/platform/idempotency TestTable_ConcurrentHistory_IsLinearizable"},
	{"usage.hold.cap,usage.hold.cap-room", "./internal/holds TestBudget_ConcurrentHistory_IsLinearizable"},
	// Claims racing on one busy hour's MAX and LATEST items: without either guard, a stale plan
	// lowers a maximum or brings back an earlier value, and the query stops equalling the ledger.
	{"rollup.set.rev", "./internal/metering/rollup TestQuery_EqualsTheLedger_AfterRandomSchedulesWithCopiesAndRedeliveries"},
	{"rollup.set.new", "./internal/metering/rollup TestQuery_EqualsTheLedger_AfterRandomSchedulesWithCopiesAndRedeliveries"},
	// Concurrent negative corrections that each fit the cycle's usage take it below zero together.
	{"usage.correction-head.fresh", "./internal/reporting/corrections TestApply_ConcurrentNegativeCorrections_NeverBelowZero"},
	{"usage.correction-head.rev", "./internal/reporting/corrections TestApply_ConcurrentNegativeCorrections_NeverBelowZero"},
	// Two claims that each cross nothing from what they read step over 80% together: without the
	// alert condition neither decides it. Two claims refused at the limit, the second committing
	// after the notifier finished the first's limit.reached: without the put's condition it is
	// written again, NEW.
	{"usage.consume.alert-below", "./internal/metering/worker TestAlerts_TwoUnitsSteppingOverAThresholdTogether_OneDecidesIt"},
	{"notify.put.once", "./internal/metering/worker TestAlerts_TwoUnitsRefusedAtTheLimit_TheNotificationIsWrittenOnce"},
	// A billing event's DEAD mark whose answer is lost: the worker that gives up later tells again.
	{"notify.put.once", "./internal/webhooks/inbox TestNotify_DeadWriteFailsOrItsAnswerIsLost_ToldOnce"},
}

// untestedGuards are the guards no run needs, each with the reason: a guard listed here is either
// dead (implied by another guard or a fact) or untested (no test yet reaches the window it
// closes). Today every guard has a run that needs it; the clauses found dead were removed from
// the code, each with its argument (see the history of internal/*/guards.go).
var untestedGuards = map[string]string{
	"console.slot.free": "tested directly by internal/operator/console TestSlots_BoundTheLabsThatRunAtOnce (a held slot refuses a run until " +
		"its lease lapses), not yet by the ablation table",
	"console.slot.holder": "tested directly by internal/operator/console TestSlots_BoundTheLabsThatRunAtOnce (a stale release frees nothing), " +
		"not yet by the ablation table",
}

// Each guard a test of its package needs fails that test when it is removed at the wire.
func TestGuardAblation_EachRemovedGuardFailsTheTestThatNeedsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the packages' tests again, once per guard")
	}
	if testenv.External() {
		t.Skip("guard ablation runs on the embedded emulators")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, a := range testAblations {
		t.Run(a.guards, func(t *testing.T) {
			pkg, test, _ := strings.Cut(a.target, " ")
			cmd := exec.Command(goBin, "test", "-count=1", "-run", "^"+test+"$", pkg)
			cmd.Dir = filepath.Join("..", "..", "..")
			cmd.Env = append(os.Environ(), instrument.EnvAblate+"="+a.guards)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s removed: %s %s still passes", a.guards, pkg, test)
			}
			if !bytes.Contains(out, []byte("--- FAIL: "+test)) {
				t.Fatalf("%s removed: the run failed, but not in %s:\n%s", a.guards, test, out)
			}
		})
	}
}

// Every condition clause Ferry sends is in the guard table, and every guard of the table is
// shown necessary: by the harness, or by a test of its own.
func TestGuardTable_EveryGuardHasARunThatNeedsIt(t *testing.T) {
	inHarness := map[string]bool{}
	for _, a := range harnessAblations {
		if _, ok := instrument.GuardNamed(a.guard); !ok {
			t.Errorf("the ablation table names %s, which is no guard", a.guard)
		}
		inHarness[a.guard] = true
	}
	for g, target := range storeAblations {
		if _, ok := instrument.GuardNamed(g); !ok {
			t.Errorf("the store table names %s, which is no guard", g)
		}
		pkg, test, _ := strings.Cut(target, " ")
		if err := needsGuardIn(filepath.Join("..", "..", "..", pkg), test, g); err != nil {
			t.Errorf("guard %s: %v", g, err)
		}
	}
	inTests := map[string]bool{}
	for _, a := range testAblations {
		for _, g := range strings.Split(a.guards, ",") {
			if _, ok := instrument.GuardNamed(g); !ok {
				t.Errorf("the test table names %s, which is no guard", g)
			}
			inTests[g] = true
		}
	}
	for g, why := range untestedGuards {
		if _, ok := instrument.GuardNamed(g); !ok {
			t.Errorf("the untested list names %s, which is no guard", g)
		}
		t.Logf("guard %s has no run that needs it: %s", g, why)
	}
	for _, g := range instrument.Guards() {
		if !inHarness[g.Name] && storeAblations[g.Name] == "" && !inTests[g.Name] && untestedGuards[g.Name] == "" {
			t.Errorf("guard %s (%s) has no run that needs it: add one, or remove the guard with the argument why it is dead", g.Name, g.Clause)
		}
	}
}

// With each guard the harness needs removed at the wire, a schedule within the budget breaks an
// invariant; the run stops there and names the seed.
func TestGuardAblation_EachRemovedGuardBreaksAnInvariant(t *testing.T) {
	if testenv.External() {
		t.Skip("guard ablation runs the harness, on the embedded emulators")
	}
	for _, a := range harnessAblations {
		t.Run(a.pipeline+"/"+a.guard, func(t *testing.T) {
			g, _ := instrument.GuardNamed(a.guard)
			rep, err := harness.Run(context.Background(), harness.Options{
				Schedules: a.budget, Pipelines: []string{a.pipeline}, Ablate: []dynamo.Guard{g}, StopAtFailure: true,
				Endpoints: emulators(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Failures) == 0 {
				t.Fatalf("%s removed: %d %s schedules kept every invariant", a.guard, rep.Schedules, a.pipeline)
			}
			f := rep.Failures[0]
			t.Logf("%s removed: seed %d (schedule %d of %d) broke: %s", a.guard, f.Seed, rep.Schedules, a.budget, f.Violations[0])
		})
	}
}

// needsGuardIn checks that a test of the package in dir runs testenv.NeedsGuard on guard.
func needsGuardIn(dir, test, guard string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return err
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		body, ok := strings.CutPrefix(string(src[max(0, bytes.Index(src, []byte("func "+test+"("))):]), "func "+test+"(")
		if !ok {
			continue
		}
		if end := strings.Index(body, "\nfunc "); end >= 0 {
			body = body[:end]
		}
		// The guard by name, or (a table over the kinds of link) by its last part.
		last := guard[strings.LastIndex(guard, "."):]
		if !strings.Contains(body, `testenv.NeedsGuard(t, "`+guard+`"`) &&
			!(strings.Contains(body, "testenv.NeedsGuard(t, ") && strings.Contains(body, `"`+last+`"`)) {
			return fmt.Errorf("%s (%s) does not run testenv.NeedsGuard on it", test, f)
		}
		return nil
	}
	return fmt.Errorf("no test %s in %s", test, dir)
}
