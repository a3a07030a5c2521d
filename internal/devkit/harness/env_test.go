package harness

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Between two schedules, reset leaves what fresh resources hold: the same tables and buckets,
// under the same names, with nothing in them; and a message left on a queue is refused.
func TestEnvReset_LeavesTheStateOfFreshResources(t *testing.T) {
	ctx := context.Background()
	endpoints, transport, ip := newInProcess(cloud.Endpoints{SQS: testenv.Endpoints(t).SQS})
	env, err := newEnv(ctx, endpoints, transport, ip, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	names := env.Names
	for logical, table := range names.Tables {
		item := map[string]types.AttributeValue{}
		for _, def := range resources.Tables {
			if def.Logical != logical {
				continue
			}
			item[def.PartitionKey.Name] = value(def.PartitionKey)
			if def.SortKey != nil {
				item[def.SortKey.Name] = value(*def.SortKey)
			}
		}
		if _, err := env.Admin.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatalf("put into %s: %v", logical, err)
		}
	}
	for _, bucket := range names.Buckets {
		if _, err := env.Admin.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("a/b"), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	reused, err := env.reset(ctx)
	if err != nil || !reused {
		t.Fatalf("reset: reused %v, %v", reused, err)
	}
	for logical, table := range env.Names.Tables {
		if names.Tables[logical] != table {
			t.Errorf("table %s is %s after the reset, was %s", logical, table, names.Tables[logical])
		}
		out, err := env.Admin.DynamoDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatalf("scan %s after the reset: %v", logical, err)
		}
		if len(out.Items) != 0 {
			t.Errorf("table %s holds %d items after the reset", logical, len(out.Items))
		}
	}
	for logical, bucket := range env.Names.Buckets {
		out, err := env.Admin.S3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatalf("list %s after the reset: %v", logical, err)
		}
		if len(out.Contents) != 0 {
			t.Errorf("bucket %s holds %d objects after the reset", logical, len(out.Contents))
		}
	}
	url := env.Names.QueueURL(resources.QueueEvents)
	if _, err := env.Admin.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("left behind")}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.reset(ctx); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("reset with a message left on the events queue: %v; want it refused", err)
	}
}

func value(a resources.Attribute) types.AttributeValue {
	if a.Type == resources.Number {
		return &types.AttributeValueMemberN{Value: "1"}
	}
	return &types.AttributeValueMemberS{Value: "k"}
}
