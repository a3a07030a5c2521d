package accounts

import "context"

// UpdateDecidedOn runs an update decided on current, an account as read before, so a test can
// hand it links that another update has changed since.
func (s *Table) UpdateDecidedOn(ctx context.Context, id string, in UpdateInput, nowMs int64, current Account) (Account, error) {
	return s.update(ctx, id, in, nowMs, current)
}

// ErrLinksMoved is errLinksMoved, for tests.
var ErrLinksMoved = errLinksMoved
