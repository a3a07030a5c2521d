package report

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// MarkIndex reads the usage table's sparse report index: the rows marked since their cycle was
// last reported (see usage/marks.go).
type MarkIndex struct {
	DB    *dynamodb.Client
	Table string
}

// Bounds of one read of the index.
const (
	// markPageItems is how many index entries one page asks for (a cycle has at most one entry
	// per counter shard, plus its budget row and corrections).
	markPageItems = 500
	// maxMarkPages bounds the pages read from one bucket.
	maxMarkPages = 10
)

const markKeyCondition = "#reportBucket = :bucket"

// Dirty returns up to limit distinct keys with marked rows, oldest mark first within each bucket,
// starting from bucket first (callers rotate it so that no bucket waits behind a busy one).
// truncated is true when more marked keys remained. The index is eventually consistent: the
// reporter re-reads every key's rows before acting.
func (m *MarkIndex) Dirty(ctx context.Context, limit, first int) (keys []Key, truncated bool, err error) {
	seen := map[string]bool{}
	for i := range resources.UsageReportBuckets {
		bucket := (first + i) % resources.UsageReportBuckets
		var start map[string]types.AttributeValue
		for range maxMarkPages {
			out, err := m.DB.Query(ctx, &dynamodb.QueryInput{
				TableName:                 aws.String(m.Table),
				IndexName:                 aws.String(resources.IndexUsageReportDue),
				KeyConditionExpression:    aws.String(markKeyCondition),
				ExpressionAttributeNames:  dynamo.Names(markKeyCondition),
				ExpressionAttributeValues: map[string]types.AttributeValue{":bucket": dynamo.S(fmt.Sprintf("%02d", bucket))},
				Limit:                     aws.Int32(markPageItems),
				ExclusiveStartKey:         start,
			})
			if err != nil {
				return keys, false, fmt.Errorf("read the report marks of bucket %02d: %w", bucket, err)
			}
			for _, item := range out.Items {
				pk := dynamo.Str(item, "pk")
				if seen[pk] {
					continue
				}
				k, ok := ParseKey(pk)
				if !ok {
					continue
				}
				if len(keys) == limit {
					return keys, true, nil
				}
				seen[pk] = true
				keys = append(keys, k)
			}
			if len(out.LastEvaluatedKey) == 0 {
				break
			}
			start = out.LastEvaluatedKey
		}
	}
	return keys, false, nil
}
