package devstack_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymeter/ferry/internal/resources"
	"github.com/ferrymeter/ferry/internal/testenv"
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
