package endpoints

import "context"

// RotateDecidedOn rotates the endpoint as read before (current), so that a test can hand it a
// read another write has overtaken since.
func (s *Store) RotateDecidedOn(ctx context.Context, current Endpoint, nowMs int64) (Endpoint, string, error) {
	return s.rotate(ctx, current, nowMs)
}

// UpdateDecidedOn updates the endpoint with a first attempt decided on current, a read another
// write may have overtaken since.
func (s *Store) UpdateDecidedOn(ctx context.Context, current Endpoint, p Patch, nowMs int64) (Endpoint, error) {
	return s.update(ctx, current.ID, p, nowMs, &current)
}

// Limits of the package, for the test that pins them.
const (
	MaxListedKinds    = maxListedKinds
	MaxUpdateAttempts = maxUpdateAttempts
)
