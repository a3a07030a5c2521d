package instrument

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Read is one item read of a DynamoDB request.
type Read struct {
	Op         string
	Table      string
	Index      string
	Consistent bool
}

// Reads lists the reads of a request that can choose their consistency (GetItem, Query,
// BatchGetItem), with logical table names where tables maps the physical name. TransactGetItems
// is always serializable and is not listed.
func Reads(params any, tables map[string]string) []Read {
	logical := func(name string) string {
		if l, ok := tables[name]; ok {
			return l
		}
		return name
	}
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		return []Read{{Op: "GetItem", Table: logical(aws.ToString(in.TableName)), Consistent: aws.ToBool(in.ConsistentRead)}}
	case *dynamodb.QueryInput:
		return []Read{{Op: "Query", Table: logical(aws.ToString(in.TableName)), Index: aws.ToString(in.IndexName), Consistent: aws.ToBool(in.ConsistentRead)}}
	case *dynamodb.BatchGetItemInput:
		var out []Read
		for t, ka := range in.RequestItems {
			out = append(out, Read{Op: "BatchGetItem", Table: logical(t), Consistent: aws.ToBool(ka.ConsistentRead)})
		}
		return out
	}
	return nil
}

// consistentTables are the tables whose reads decide what a write does next, which the design
// makes strongly consistent: the ledger (a claim lost, a cancelled billing resolved), the budget
// rows, the holds, the idempotency records and the accounts a billing decision is made for.
var consistentTables = map[string]bool{
	resources.TableLedger: true, resources.TableUsage: true, resources.TableHolds: true,
	resources.TableIdempotency: true, resources.TableAccounts: true, resources.TableAccountLinks: true,
}

// eventualReads are the reads of those tables that the design lets be eventually consistent, by
// function: the advisory gate's budget read, a courtesy that may be a moment stale.
var eventualReads = map[string]map[string]bool{
	resources.FunctionIngest: {resources.TableUsage: true},
}

// StaleRead says what is wrong with a read made by function: a read the design calls strongly
// consistent sent as eventually consistent. It returns "" for a read that is right. A query of a
// global secondary index cannot be strongly consistent, and its callers re-read what it lists.
func StaleRead(function string, r Read) string {
	if r.Consistent || r.Index != "" || !consistentTables[r.Table] || eventualReads[function][r.Table] {
		return ""
	}
	return fmt.Sprintf("%s: %s on %s is eventually consistent; the design reads it strongly consistent", function, r.Op, r.Table)
}
