package resources

// The IAM actions each access level allows, by resource kind: the CDK app grants exactly these
// (infra/functions.go) and the test harness's IAM guard refuses every other call on a function's
// clients (internal/devkit/instrument), so what a function may do locally is what its role lets it do in
// AWS. DynamoDB authorizes TransactWriteItems and TransactGetItems by the per-item actions below,
// so there are no separate transaction actions.
var (
	// TableReadActions are granted on the table and each of its indexes for Read and ReadWrite.
	TableReadActions = []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem", "dynamodb:DescribeTable"}
	// TableWriteActions are granted on the table for ReadWrite.
	TableWriteActions = []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}
	// QueueSendActions are granted on the queue for Send; SendMessageBatch is authorized by
	// SendMessage. Consume is granted by the event source mapping.
	QueueSendActions = []string{"sqs:SendMessage"}
	// BucketListActions are granted on the bucket for Read and ReadWrite: they let a missing
	// object read as 404, not 403.
	BucketListActions = []string{"s3:ListBucket"}
	// ObjectReadActions are granted on the bucket's objects for Read and ReadWrite.
	ObjectReadActions = []string{"s3:GetObject"}
	// ObjectWriteActions are granted on the bucket's objects for ReadWrite.
	ObjectWriteActions = []string{"s3:PutObject"}
)

// TableAllows reports whether a table granted at access allows action.
func TableAllows(access Access, action string) bool {
	return contains(TableReadActions, action) || (access == ReadWrite && contains(TableWriteActions, action))
}

// BucketAllows reports whether a bucket granted at access allows action.
func BucketAllows(access Access, action string) bool {
	return contains(BucketListActions, action) || contains(ObjectReadActions, action) ||
		(access == ReadWrite && contains(ObjectWriteActions, action))
}

// QueueAllows reports whether a queue granted at access allows action to the function itself.
func QueueAllows(access Access, action string) bool {
	return access.Sends() && contains(QueueSendActions, action)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
