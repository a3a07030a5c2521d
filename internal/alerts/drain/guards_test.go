package drain_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/alerts/drain"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
)

// The notifier dies after writing a notification's deliveries and before marking it fanned out;
// the deliveries are delivered meanwhile. The next run fans the notification out again: its
// puts find the deliveries there and leave them be, so nothing is sent twice. (Without the
// put's condition the second fan-out resets the DELIVERED delivery to PENDING, and it is sent
// again.)
func TestGuard_AFanOutRunAgainNeverResetsADelivery(t *testing.T) {
	testenv.NeedsGuard(t, "drain.delivery.put.absent", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		r := rigOn(t, env, db)
		r.endpoint(t, epID("a"), nil, nil, secretA)
		n := r.notification(t, "acct_1", 800)
		r.d.Hook = crashAt(drain.BeforeMark)
		if res := r.run(t, r.d); res.Fanned != 0 || res.Delivered != 1 {
			return fmt.Errorf("first run %+v; want the delivery delivered and the notification not marked", res)
		}
		res := r.run(t, r.d)
		if res.Fanned != 1 {
			return fmt.Errorf("second run %+v; want the notification marked", res)
		}
		if got := len(r.rcv.requests(epID("a"))); got != 1 {
			return fmt.Errorf("the endpoint was sent %d requests; want 1", got)
		}
		if d := r.delivery(t, n, epID("a")); d.Status != notify.DeliveryDelivered || d.Attempts != 1 {
			return fmt.Errorf("delivery %+v; want DELIVERED after one attempt", d)
		}
		return nil
	})
}

// Two notifiers read the same due delivery; one claims and sends it. The other's claim, decided
// on the revision both read, is refused, so the endpoint is sent the attempt once.
func TestGuard_TwoNotifiersNeverBothClaimOneAttempt(t *testing.T) {
	testenv.NeedsGuard(t, "drain.delivery.rewrite.rev", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		r := rigOn(t, env, db)
		r.endpoint(t, epID("a"), nil, nil, secretA)
		n := r.notification(t, "acct_1", 800)
		if _, _, err := r.d.FanOut(context.Background(), drain.Ref{PK: notify.Partition(n.ID()), SK: notify.SKNotification}, r.endpoints(t)); err != nil {
			return err
		}
		ref, eps := drain.DeliveryRef(n.ID(), epID("a")), r.byID(t)
		other := r.drainer("notifier-two")
		first := true
		r.d.Hook = func(ctx context.Context, p drain.Point, _ drain.Ref) error {
			if p == drain.BeforeClaim && first {
				first = false
				_, err := other.Deliver(ctx, ref, eps)
				return err
			}
			return nil
		}
		if _, err := r.d.Deliver(context.Background(), ref, eps); err != nil {
			return err
		}
		if got := len(r.rcv.requests(epID("a"))); got != 1 {
			return fmt.Errorf("the endpoint was sent %d requests for one attempt; want 1", got)
		}
		return nil
	})
}

// A notifier reads a notification while one endpoint is registered and writes its delivery;
// before it marks the notification, a second endpoint is registered and another notifier fans
// the notification out to both and marks it. The first notifier's mark is refused, so the
// notification's record says it went to both. (Without the mark's condition the stale mark
// overwrites it with the first endpoint alone.)
func TestGuard_AStaleFanOutNeverOverwritesWhomANotificationWentTo(t *testing.T) {
	testenv.NeedsGuard(t, "drain.notification.fanned.new", func(t *testing.T, env *testenv.Env, db *dynamodb.Client) error {
		r := rigOn(t, env, db)
		r.endpoint(t, epID("a"), nil, nil, secretA)
		n := r.notification(t, "acct_1", 800)
		other := r.drainer("notifier-two")
		first := true
		var otherErr error
		r.d.Hook = func(ctx context.Context, p drain.Point, _ drain.Ref) error {
			if p == drain.BeforeMark && first {
				first = false
				r.endpoint(t, epID("b"), nil, nil, secretA)
				_, otherErr = other.Run(ctx)
			}
			return nil
		}
		if _, err := r.d.Run(context.Background()); err != nil {
			return err
		}
		if otherErr != nil {
			return otherErr
		}
		ns, _, err := r.store.Notifications(context.Background(), "acct_1", "", 0)
		if err != nil {
			return err
		}
		if want := sorted(epID("a"), epID("b")); len(ns) != 1 || !slices.Equal(ns[0].FannedTo, want) {
			return fmt.Errorf("%d notifications, the first fanned out to %v; want one, fanned out to %v", len(ns), fannedTo(ns), want)
		}
		if _, err := r.store.Delivery(context.Background(), epID("b"), n.ID()); errors.Is(err, drain.ErrNoDelivery) {
			return errors.New("no delivery to the endpoint registered second")
		}
		return nil
	})
}

func fannedTo(ns []drain.Notification) []string {
	if len(ns) == 0 {
		return nil
	}
	return ns[0].FannedTo
}
