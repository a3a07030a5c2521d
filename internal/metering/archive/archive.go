// Package archive keeps every accepted event's payload in S3, partitioned by date so Athena can
// read it as a table. The archive is written before the analytics row, so a row never exists
// whose payload is nowhere; a redrive rebuilds rows from it.
package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// ErrNotFound: no object under the key.
var ErrNotFound = errors.New("archived payload not found")

// Key is the deterministic object key of an event's payload:
// events/dt=YYYY-MM-DD/account=<id>/<escaped event id>.json, dated by the claim's timestamp so
// every retry writes the same key.
func Key(accountID, eventID string, rowInsertedAtMs int64) string {
	day := time.UnixMilli(rowInsertedAtMs).UTC().Format(time.DateOnly)
	return fmt.Sprintf("events/dt=%s/account=%s/%s.json", day, accountID, url.PathEscape(eventID))
}

// BatchKey is the deterministic object key of a batch's payloads:
// events/dt=YYYY-MM-DD/account=<id>/batch-<hash>.jsonl, dated by the unit's first arrival.
// The object holds the payloads of every event of the unit, in unit order, each as it was sent
// and followed by a newline; each admitted event's entry records its byte range.
func BatchKey(accountID, batch string, rowInsertedAtMs int64) string {
	day := time.UnixMilli(rowInsertedAtMs).UTC().Format(time.DateOnly)
	return fmt.Sprintf("events/dt=%s/account=%s/batch-%s.jsonl", day, accountID, batch)
}

// Location is where one event's payload is: a whole object (Length 0) or a byte range of a
// batch's object.
type Location struct {
	Key    string
	Offset int64
	Length int64
}

// S3 is the archive on an S3 bucket.
type S3 struct {
	Client *s3.Client
	Bucket string
}

// Put stores body under key unless an object is already there. Every retry of an event writes
// byte-identical bytes under the same key, so an existing object is the same payload: the write
// is conditional (If-None-Match: *) only so that a retry costs no overwrite.
func (a *S3) Put(ctx context.Context, key string, body []byte) error {
	_, err := a.Client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:      aws.String(a.Bucket),
		Key:         aws.String(key),
		Body:        bytes.NewReader(body),
		ContentType: aws.String("application/cloudevents+json"),
		IfNoneMatch: aws.String("*"),
	})
	if isPreconditionFailed(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive %s: %w", key, err)
	}
	return nil
}

// Get reads an archived payload.
func (a *S3) Get(ctx context.Context, key string) ([]byte, error) {
	out, err := a.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(a.Bucket), Key: aws.String(key)})
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read archive %s: %w", key, err)
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}

// Read reads one event's payload at its location: the whole object, or its byte range (one
// ranged GET).
func (a *S3) Read(ctx context.Context, loc Location) ([]byte, error) {
	if loc.Length == 0 {
		return a.Get(ctx, loc.Key)
	}
	out, err := a.Client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(a.Bucket), Key: aws.String(loc.Key),
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", loc.Offset, loc.Offset+loc.Length-1)),
	})
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read archive %s: %w", loc.Key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("read archive %s: %w", loc.Key, err)
	}
	if int64(len(b)) != loc.Length {
		return nil, fmt.Errorf("read archive %s: %d bytes at %d, want %d", loc.Key, len(b), loc.Offset, loc.Length)
	}
	return b, nil
}

// Exists reports whether an object is stored under key (one HEAD).
func (a *S3) Exists(ctx context.Context, key string) (bool, error) {
	_, err := a.Client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(a.Bucket), Key: aws.String(key)})
	var nf *types.NotFound
	var nsk *types.NoSuchKey
	if errors.As(err, &nf) || errors.As(err, &nsk) {
		return false, nil
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode() == "NotFound" || apiErr.ErrorCode() == "404") {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("probe archive %s: %w", key, err)
	}
	return true, nil
}

// isPreconditionFailed recognises S3's answer to a conditional write whose object exists (HTTP
// 412 PreconditionFailed; the SDK has no typed error for it).
func isPreconditionFailed(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "PreconditionFailed"
}
