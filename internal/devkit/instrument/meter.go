package instrument

import (
	"context"
	"math"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithymw "github.com/aws/smithy-go/middleware"
)

// RequestMeter counts DynamoDB round trips and request units at the client. It asks DynamoDB for
// the consumed capacity and uses it when the endpoint reports it (AWS does; emulators do not);
// otherwise it applies DynamoDB's published sizing rules to the items in the request and the
// response. For updates, whose resulting item it does not see, it assumes one write unit (an item
// under 1 KB); benchmarks check that assumption against the stored items' sizes.
type RequestMeter struct {
	mu  sync.Mutex
	ops map[string]*OpUsage
}

// OpUsage is what one operation name consumed.
type OpUsage struct {
	Calls     int
	Errors    int
	ReadUnits float64
	// WriteUnits includes the doubled cost of transactional items.
	WriteUnits float64
	// Reported counts calls whose units came from DynamoDB rather than the sizing rules.
	Reported int
}

// NewRequestMeter returns an empty meter.
func NewRequestMeter() *RequestMeter { return &RequestMeter{ops: map[string]*OpUsage{}} }

// Option installs the meter on a DynamoDB client.
func (m *RequestMeter) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *smithymw.Stack) error {
		return stack.Initialize.Add(smithymw.InitializeMiddlewareFunc("ferry.RequestMeter", m.handle), smithymw.After)
	})
}

func (m *RequestMeter) handle(ctx context.Context, in smithymw.InitializeInput, next smithymw.InitializeHandler) (smithymw.InitializeOutput, smithymw.Metadata, error) {
	askForCapacity(in.Parameters)
	out, md, err := next.HandleInitialize(ctx, in)
	op := middleware.GetOperationName(ctx)
	read, write, reported := units(in.Parameters, out.Result)
	m.mu.Lock()
	u := m.ops[op]
	if u == nil {
		u = &OpUsage{}
		m.ops[op] = u
	}
	u.Calls++
	if err != nil {
		u.Errors++
	}
	u.ReadUnits += read
	u.WriteUnits += write
	if reported {
		u.Reported++
	}
	m.mu.Unlock()
	return out, md, err
}

// Snapshot returns a copy of the per-operation counts.
func (m *RequestMeter) Snapshot() map[string]OpUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]OpUsage, len(m.ops))
	for k, v := range m.ops {
		out[k] = *v
	}
	return out
}

// Totals sums every operation.
func (m *RequestMeter) Totals() OpUsage {
	var t OpUsage
	for _, u := range m.Snapshot() {
		t.Calls += u.Calls
		t.Errors += u.Errors
		t.ReadUnits += u.ReadUnits
		t.WriteUnits += u.WriteUnits
		t.Reported += u.Reported
	}
	return t
}

// Operations returns the counted operation names, sorted.
func (m *RequestMeter) Operations() []string { return sortedKeys(m.Snapshot()) }

// Reset clears the counts.
func (m *RequestMeter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops = map[string]*OpUsage{}
}

func askForCapacity(params any) {
	const total = types.ReturnConsumedCapacityTotal
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.PutItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.UpdateItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.DeleteItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.QueryInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.TransactWriteItemsInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.TransactGetItemsInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.BatchWriteItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.BatchGetItemInput:
		in.ReturnConsumedCapacity = total
	}
}

// Sizing rules: a read unit covers 4 KB read strongly (half a unit eventually consistent), a
// write unit covers 1 KB; transactional items cost double.
const (
	readUnitBytes  = 4096
	writeUnitBytes = 1024
)

func readUnits(bytes int, consistent bool) float64 {
	u := math.Max(1, math.Ceil(float64(bytes)/readUnitBytes))
	if !consistent {
		u /= 2
	}
	return u
}

func writeUnits(bytes int) float64 { return math.Max(1, math.Ceil(float64(bytes)/writeUnitBytes)) }

func reportedUnits(cc ...*types.ConsumedCapacity) (read, write float64, ok bool) {
	for _, c := range cc {
		if c == nil {
			continue
		}
		ok = true
		if c.ReadCapacityUnits != nil || c.WriteCapacityUnits != nil {
			if c.ReadCapacityUnits != nil {
				read += *c.ReadCapacityUnits
			}
			if c.WriteCapacityUnits != nil {
				write += *c.WriteCapacityUnits
			}
			continue
		}
		if c.CapacityUnits != nil {
			write += *c.CapacityUnits // operations report one figure; callers split by kind
		}
	}
	return read, write, ok
}

// units returns the read and write units one call consumed.
func units(params, result any) (read, write float64, reported bool) {
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		if out, _ := result.(*dynamodb.GetItemOutput); out != nil {
			if _, w, ok := reportedUnits(out.ConsumedCapacity); ok {
				return w, 0, true
			}
			return readUnits(ItemSize(out.Item), consistent(in.ConsistentRead)), 0, false
		}
		return readUnits(0, consistent(in.ConsistentRead)), 0, false
	case *dynamodb.BatchGetItemInput:
		// Each key is a read of its own: an item by its size, a key with no item at the minimum
		// (as GetItem), a key left unprocessed at the minimum too (an over-count, not an under).
		if out, _ := result.(*dynamodb.BatchGetItemOutput); out != nil {
			if _, w, ok := reportedUnits(ptrs(out.ConsumedCapacity)...); ok {
				return w, 0, true
			}
		}
		var out *dynamodb.BatchGetItemOutput
		if o, _ := result.(*dynamodb.BatchGetItemOutput); o != nil {
			out = o
		}
		for table, ka := range in.RequestItems {
			found := 0
			if out != nil {
				for _, item := range out.Responses[table] {
					read += readUnits(ItemSize(item), consistent(ka.ConsistentRead))
					found++
				}
			}
			read += float64(max(0, len(ka.Keys)-found)) * readUnits(0, consistent(ka.ConsistentRead))
		}
		return read, 0, false
	case *dynamodb.QueryInput:
		if out, _ := result.(*dynamodb.QueryOutput); out != nil {
			if _, w, ok := reportedUnits(out.ConsumedCapacity); ok {
				return w, 0, true
			}
			size := 0
			for _, item := range out.Items {
				size += ItemSize(item)
			}
			return readUnits(size, consistent(in.ConsistentRead)), 0, false
		}
		return readUnits(0, consistent(in.ConsistentRead)), 0, false
	case *dynamodb.PutItemInput:
		if out, _ := result.(*dynamodb.PutItemOutput); out != nil {
			if _, w, ok := reportedUnits(out.ConsumedCapacity); ok {
				return 0, w, true
			}
		}
		return 0, writeUnits(ItemSize(in.Item)), false
	case *dynamodb.UpdateItemInput:
		if out, _ := result.(*dynamodb.UpdateItemOutput); out != nil {
			if _, w, ok := reportedUnits(out.ConsumedCapacity); ok {
				return 0, w, true
			}
		}
		return 0, 1, false
	case *dynamodb.DeleteItemInput:
		if out, _ := result.(*dynamodb.DeleteItemOutput); out != nil {
			if _, w, ok := reportedUnits(out.ConsumedCapacity); ok {
				return 0, w, true
			}
		}
		return 0, 1, false
	case *dynamodb.TransactWriteItemsInput:
		if out, _ := result.(*dynamodb.TransactWriteItemsOutput); out != nil {
			if r, w, ok := reportedUnits(ptrs(out.ConsumedCapacity)...); ok {
				return r, w, true
			}
		}
		for _, item := range in.TransactItems {
			switch {
			case item.Put != nil:
				write += 2 * writeUnits(ItemSize(item.Put.Item))
			case item.ConditionCheck != nil:
				read += 2 * readUnits(0, true)
			default:
				write += 2
			}
		}
		return read, write, false
	case *dynamodb.TransactGetItemsInput:
		if out, _ := result.(*dynamodb.TransactGetItemsOutput); out != nil {
			if _, w, ok := reportedUnits(ptrs(out.ConsumedCapacity)...); ok {
				return w, 0, true
			}
			for _, r := range out.Responses {
				read += 2 * readUnits(ItemSize(r.Item), true)
			}
			return read, 0, false
		}
		return 2 * float64(len(in.TransactItems)), 0, false
	case *dynamodb.BatchWriteItemInput:
		if out, _ := result.(*dynamodb.BatchWriteItemOutput); out != nil {
			if _, w, ok := reportedUnits(ptrs(out.ConsumedCapacity)...); ok {
				return 0, w, true
			}
		}
		for _, reqs := range in.RequestItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					write += writeUnits(ItemSize(r.PutRequest.Item))
				} else {
					write++
				}
			}
		}
		return 0, write, false
	}
	return 0, 0, false
}

func consistent(b *bool) bool { return b != nil && *b }

// ItemSize is an item's size by DynamoDB's rules: attribute names plus values (strings as UTF-8,
// numbers about one byte per two digits plus one, containers three bytes plus their elements).
func ItemSize(item map[string]types.AttributeValue) int {
	size := 0
	for name, v := range item {
		size += len(name) + valueSize(v)
	}
	return size
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value) // UTF-8 bytes
	case *types.AttributeValueMemberN:
		return (len(v.Value)+1)/2 + 1
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberL:
		size := 3
		for _, e := range v.Value {
			size += 1 + valueSize(e)
		}
		return size
	case *types.AttributeValueMemberM:
		size := 3
		for k, e := range v.Value {
			size += 1 + len(k) + valueSize(e)
		}
		return size
	case *types.AttributeValueMemberSS:
		size := 0
		for _, s := range v.Value {
			size += len(s)
		}
		return size
	case *types.AttributeValueMemberNS:
		size := 0
		for _, s := range v.Value {
			size += (len(s)+1)/2 + 1
		}
		return size
	}
	return 0
}

func ptrs(cc []types.ConsumedCapacity) []*types.ConsumedCapacity {
	out := make([]*types.ConsumedCapacity, len(cc))
	for i := range cc {
		out[i] = &cc[i]
	}
	return out
}
