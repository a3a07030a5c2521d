package main

import (
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// alarmPeriod is the window every alarm sums or maximizes over; one period at the threshold
// fires it. Ferry's terminal states are rare and each one matters, so there is no smoothing.
const alarmPeriod = time.Minute

// functionAlarmThreshold fires a function's Errors or Throttles alarm on the first occurrence:
// a worker reports failed messages in its batch response, so a Lambda error means a crash or a
// timeout, and a throttle means lost capacity.
const functionAlarmThreshold = 1

// AlarmsProps configures the alarms.
type AlarmsProps struct {
	Config      Config
	Definitions Definitions
	Storage     *Storage
	Functions   *Functions
	// Accepted collects the template judges' findings this app accepts, with their reasons.
	Accepted *accepted
}

// Alarms is the alarm topic and every alarm that notifies it.
type Alarms struct {
	Topic awssns.Topic
	// TopicKey encrypts the topic: a customer managed key, because CloudWatch alarms cannot
	// publish to a topic under the AWS managed SNS key.
	TopicKey awskms.Key
	Alarms   []awscloudwatch.Alarm
}

// topicKeyPendingWindow is how long a deleted topic key can still be recovered.
const topicKeyPendingWindow = 30 * 24 * time.Hour

// NewAlarms creates one SNS topic and, all notifying it: a depth alarm on every dead-letter
// queue, an alarm for every entry of metrics.Alarms, and Errors and Throttles alarms for every
// function. A new terminal state needs only its entry in metrics.Alarms.
func NewAlarms(scope constructs.Construct, id string, props *AlarmsProps) *Alarms {
	this := constructs.NewConstruct(scope, jsii.String(id))
	cfg := props.Config
	// The topic is encrypted at rest under a key of its own: CloudWatch alarms cannot publish to
	// a topic under the AWS managed SNS key, so the key's policy lets CloudWatch use it. It costs
	// $1 a month, plus $1 a month for each of its first two yearly rotations (docs/cost-at-rest.md).
	key := awskms.NewKey(this, jsii.String("TopicKey"), &awskms.KeyProps{
		Description:       jsii.String("Ferry " + cfg.Stage + " alarm topic: CloudWatch alarms publish under it"),
		EnableKeyRotation: jsii.Bool(true),
		PendingWindow:     seconds(topicKeyPendingWindow),
		RemovalPolicy:     removalPolicy(cfg),
	})
	key.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarmsPublish"),
		Effect:     awsiam.Effect_ALLOW,
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("kms:Decrypt", "kms:GenerateDataKey*"),
		// In a key policy, "*" is this key.
		Resources: jsii.Strings("*"),
	}), nil)
	topic := awssns.NewTopic(this, jsii.String("Topic"), &awssns.TopicProps{
		DisplayName: jsii.String("Ferry " + cfg.Stage + " alarms"),
		EnforceSSL:  jsii.Bool(true),
		MasterKey:   key,
	})
	if cfg.AlarmEmail != "" {
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.AlarmEmail), nil))
	}
	a := &Alarms{Topic: topic, TopicKey: key}
	action := awscloudwatchactions.NewSnsAction(topic)
	add := func(alarm awscloudwatch.Alarm) {
		alarm.AddAlarmAction(action)
		alarm.AddOkAction(action)
		a.Alarms = append(a.Alarms, alarm)
	}

	for _, q := range props.Definitions.Queues {
		add(dlqAlarm(this, cfg, q, props.Storage.Queues[q.DLQLogical()]))
	}
	add(depthAlarm(this, cfg, failedRunsLogical, props.Storage.FailedRuns,
		"A scheduled run failed, or could not be delivered: each message here names the function and the error. "+
			"The next run retries the work; find the cause in the function's log group, then delete the messages."))
	for _, m := range props.Definitions.Alarms {
		add(metricAlarm(this, cfg, m))
	}
	for _, f := range props.Definitions.Functions {
		fn := props.Functions.ByName[f.Name]
		add(functionAlarm(this, cfg, f, "Errors", fn.MetricErrors(sumOverPeriod())))
		add(functionAlarm(this, cfg, f, "Throttles", fn.MetricThrottles(sumOverPeriod())))
	}
	return a
}

func sumOverPeriod() *awscloudwatch.MetricOptions {
	return &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: seconds(alarmPeriod)}
}

// dlqAlarm fires as soon as any message sits in the queue's dead-letter queue: each one is an
// accepted event that the worker gave up on.
func dlqAlarm(scope constructs.Construct, cfg Config, q resources.Queue, dlq awssqs.IQueue) awscloudwatch.Alarm {
	return depthAlarm(scope, cfg, q.DLQLogical(), dlq,
		fmt.Sprintf("Messages are waiting in %s: the worker gave up on them after %d receives. Inspect them, fix the cause, then redrive them to %s.", q.DLQLogical(), q.MaxReceiveCount, q.Logical))
}

// depthAlarm fires as soon as any message sits in a dead-letter queue.
func depthAlarm(scope constructs.Construct, cfg Config, logical string, queue awssqs.IQueue, description string) awscloudwatch.Alarm {
	metric := queue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
		Statistic: jsii.String("Maximum"),
		Period:    seconds(alarmPeriod),
	})
	return metric.CreateAlarm(scope, jsii.String(pascal(logical)+"DepthAlarm"), &awscloudwatch.CreateAlarmOptions{
		AlarmName:          jsii.String(resources.PhysicalName(cfg.Prefix(), logical+"-depth")),
		AlarmDescription:   jsii.String(description),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
}

// metricAlarm fires when one of Ferry's own metrics sums to its threshold within a period.
func metricAlarm(scope constructs.Construct, cfg Config, m metrics.Alarm) awscloudwatch.Alarm {
	metric := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:  jsii.String(metrics.Namespace),
		MetricName: jsii.String(m.Metric),
		Statistic:  jsii.String("Sum"),
		Period:     seconds(alarmPeriod),
	})
	return metric.CreateAlarm(scope, jsii.String(m.Metric+"Alarm"), &awscloudwatch.CreateAlarmOptions{
		AlarmName:          jsii.String(resources.PhysicalName(cfg.Prefix(), m.Metric)),
		AlarmDescription:   jsii.String(m.Description),
		Threshold:          jsii.Number(m.Threshold),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
}

func functionAlarm(scope constructs.Construct, cfg Config, f resources.Function, metricName string, metric awscloudwatch.Metric) awscloudwatch.Alarm {
	return metric.CreateAlarm(scope, jsii.String(pascal(f.Name)+metricName+"Alarm"), &awscloudwatch.CreateAlarmOptions{
		AlarmName:          jsii.String(resources.PhysicalName(cfg.Prefix(), f.Name+"-"+metricName)),
		AlarmDescription:   jsii.String(fmt.Sprintf("The %s function reported %s. Check its log group.", f.Name, metricName)),
		Threshold:          jsii.Number(functionAlarmThreshold),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
}
