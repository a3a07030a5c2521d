package devstack_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestProvision_CreatesEveryDefinedResource(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	for _, def := range resources.Tables {
		out, err := env.Clients.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(env.Names.Table(def.Logical))})
		if err != nil {
			t.Fatalf("describe %s: %v", def.Logical, err)
		}
		if got := aws.ToString(out.Table.TableName); got != env.Names.Table(def.Logical) {
			t.Errorf("table name = %q", got)
		}
		if def.TTLAttribute != "" {
			ttl, err := env.Clients.DynamoDB.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(env.Names.Table(def.Logical))})
			if err != nil {
				t.Fatalf("describe TTL %s: %v", def.Logical, err)
			}
			if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != def.TTLAttribute {
				t.Errorf("%s TTL attribute = %q, want %q", def.Logical, got, def.TTLAttribute)
			}
		}
	}
	for _, b := range resources.Buckets {
		if _, err := env.Clients.S3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(env.Names.Bucket(b.Logical))}); err != nil {
			t.Errorf("head bucket %s: %v", b.Logical, err)
		}
	}
	for _, q := range resources.Queues {
		out, err := env.Clients.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(env.Names.QueueURL(q.Logical)), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameRedrivePolicy},
		})
		if err != nil {
			t.Fatalf("queue attributes %s: %v", q.Logical, err)
		}
		if !strings.Contains(out.Attributes["RedrivePolicy"], "deadLetterTargetArn") {
			t.Errorf("%s has no redrive policy: %v", q.Logical, out.Attributes)
		}
	}
}

// Provisioning again under the same prefix reuses every resource that is there, with what it
// holds, and gives the same names: a stack killed and started again has its state.
func TestProvision_AgainUnderTheSamePrefix_ReusesWhatIsThere(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	ledger := env.Names.Table(resources.TableLedger)
	if _, err := env.Clients.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(ledger), Item: map[string]ddbtypes.AttributeValue{
		"pk": &ddbtypes.AttributeValueMemberS{Value: "kept"},
	}}); err != nil {
		t.Fatal(err)
	}
	again, err := devstack.Provision(ctx, env.Clients, env.Prefix, devstack.ProvisionOptions{VisibilityTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("provision again: %v", err)
	}
	if !reflect.DeepEqual(again, env.Names) {
		t.Errorf("names %+v, first time %+v", again, env.Names)
	}
	out, err := env.Clients.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(ledger), ConsistentRead: aws.Bool(true), Key: map[string]ddbtypes.AttributeValue{
		"pk": &ddbtypes.AttributeValueMemberS{Value: "kept"},
	}})
	if err != nil || out.Item == nil {
		t.Errorf("the ledger's item after provisioning again: %v %v", out, err)
	}
}

// An existing resource that differs from its definition is not used: the error names it and
// the difference.
func TestProvision_AResourceThatDiffersFromItsDefinition_IsAnErrorNamingTheDifference(t *testing.T) {
	ledgerDef := tableDef(t, resources.TableLedger)
	wrongKey := ledgerDef
	wrongKey.SortKey = &resources.Attribute{Name: "other", Type: resources.Number}
	noIndex := tableDef(t, resources.TableLedger)
	noIndex.Indexes = nil
	withIndex := tableDef(t, resources.TableLedger)
	withIndex.Indexes = append(append([]resources.Index(nil), withIndex.Indexes...), resources.Index{Name: "byOther", PartitionKey: resources.Attribute{Name: "other", Type: resources.String}})
	otherTTL := tableDef(t, resources.TableLedger)
	otherTTL.TTLAttribute = "goneAt"
	for name, c := range map[string]struct {
		existing resources.Table
		want     []string
	}{
		"another sort key":     {wrongKey, []string{"ledger", "key schema is HASH pk", "RANGE other", "want HASH pk"}},
		"an index missing":     {noIndex, []string{"ledger", "is missing"}},
		"an index too many":    {withIndex, []string{"ledger", "index byOther is not in the definition"}},
		"TTL on another field": {otherTTL, []string{"ledger", `TTL is on "goneAt"`}},
	} {
		t.Run(name, func(t *testing.T) {
			env := testenv.New(t, testenv.Options{Tables: []resources.Table{c.existing}, Queues: []resources.Queue{}, Buckets: []resources.Bucket{}})
			_, err := devstack.Provision(context.Background(), env.Clients, env.Prefix, devstack.ProvisionOptions{
				Tables: []resources.Table{ledgerDef}, Queues: []resources.Queue{}, Buckets: []resources.Bucket{},
			})
			var mismatch *devstack.MismatchError
			if !errors.As(err, &mismatch) {
				t.Fatalf("err %v; want a mismatch", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
	t.Run("a queue with another visibility timeout", func(t *testing.T) {
		q := resources.Queues[0]
		env := testenv.New(t, testenv.Options{Tables: []resources.Table{}, Queues: []resources.Queue{q}, Buckets: []resources.Bucket{}, VisibilityTimeout: 7 * time.Second})
		_, err := devstack.Provision(context.Background(), env.Clients, env.Prefix, devstack.ProvisionOptions{
			Tables: []resources.Table{}, Queues: []resources.Queue{q}, Buckets: []resources.Bucket{}, VisibilityTimeout: 5 * time.Second,
		})
		if err == nil || !strings.Contains(err.Error(), `VisibilityTimeout is "7", want "5"`) || !strings.Contains(err.Error(), env.Prefix+"-"+q.Logical) {
			t.Errorf("err %v; want the queue and its visibility timeout named", err)
		}
	})
	t.Run("a queue whose dead-letter queue is another", func(t *testing.T) {
		q := resources.Queues[0]
		env := testenv.New(t, testenv.Options{Tables: []resources.Table{}, Queues: []resources.Queue{q}, Buckets: []resources.Bucket{}})
		moved := q
		moved.MaxReceiveCount = q.MaxReceiveCount + 1
		_, err := devstack.Provision(context.Background(), env.Clients, env.Prefix, devstack.ProvisionOptions{
			Tables: []resources.Table{}, Queues: []resources.Queue{moved}, Buckets: []resources.Bucket{}, VisibilityTimeout: 2 * time.Second,
		})
		if err == nil || !strings.Contains(err.Error(), "RedrivePolicy") {
			t.Errorf("err %v; want the redrive policy named", err)
		}
	})
}

func tableDef(t *testing.T, logical string) resources.Table {
	t.Helper()
	for _, def := range resources.Tables {
		if def.Logical == logical {
			return def
		}
	}
	t.Fatalf("no table %s", logical)
	return resources.Table{}
}

// A table that appears between provisioning's look and its CreateTable — made by another
// provisioning of the prefix, or by the CreateTable itself when the SDK retried a request whose
// answer was lost after the endpoint acted on it — is checked and used like one that was there,
// not an error: CreateTable's "already exists" is the answer such a retry gets.
func TestProvision_ATableMadeMeanwhile_IsCheckedAndUsed(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	only := devstack.ProvisionOptions{Tables: []resources.Table{tableDef(t, resources.TableLedger)}, Queues: []resources.Queue{}, Buckets: []resources.Bucket{}}
	prefix := testenv.UniquePrefix()
	name := resources.PhysicalName(prefix, resources.TableLedger)
	made := false
	meanwhile := func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("madeMeanwhile", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				var missing *ddbtypes.ResourceNotFoundException
				if d, ok := in.Parameters.(*dynamodb.DescribeTableInput); ok && !made && aws.ToString(d.TableName) == name && errors.As(err, &missing) {
					made = true
					if _, perr := devstack.Provision(ctx, env.Clients, prefix, only); perr != nil {
						return out, md, perr
					}
				}
				return out, md, err
			}), middleware.After)
		})
	}
	clients := env.ClientsWith(t, meanwhile)
	names, err := devstack.Provision(ctx, clients, prefix, only)
	t.Cleanup(func() { _ = devstack.Teardown(context.Background(), env.Clients, names) })
	if !made {
		t.Fatal("the table was never made meanwhile: the test did not reach its window")
	}
	if err != nil {
		t.Fatalf("provisioning with the table made meanwhile: %v", err)
	}
	if names.Table(resources.TableLedger) != name {
		t.Errorf("names %+v", names)
	}
}
