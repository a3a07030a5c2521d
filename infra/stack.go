package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// adminKeyLength is the length of the generated operator key, in letters and digits (~285 bits).
const adminKeyLength = 48

// FerryStackProps configures the stack.
type FerryStackProps struct {
	awscdk.StackProps
	Config      Config
	Definitions Definitions
	// SourceRoot is the module root, where functions/<name> live.
	SourceRoot string
}

// NewFerryStack creates everything Ferry needs in one account and region: the tables, queues and
// archive bucket, the functions with least-privilege roles, their schedules, the HTTP API, the
// operator key and the alarms. The stack names no account or region, so it synthesizes offline.
func NewFerryStack(scope constructs.Construct, id string, props *FerryStackProps) (awscdk.Stack, error) {
	cfg, defs := props.Config, props.Definitions
	if err := errors.Join(cfg.Validate(), defs.Validate(), checkDeployable(cfg, defs, props.SourceRoot)); err != nil {
		return nil, err
	}
	digest, err := sourceDigest(props.SourceRoot)
	if err != nil {
		return nil, err
	}

	stackProps := props.StackProps
	if stackProps.Description == nil {
		stackProps.Description = jsii.String("Ferry (" + cfg.Stage + "): correct usage billing on AWS serverless")
	}
	stack := awscdk.NewStack(scope, jsii.String(id), &stackProps)
	awscdk.Tags_Of(stack).Add(jsii.String("project"), jsii.String("ferry"), nil)
	awscdk.Tags_Of(stack).Add(jsii.String("stage"), jsii.String(cfg.Stage), nil)

	accepted := newAccepted()
	storage := NewStorage(stack, "Storage", &StorageProps{Config: cfg, Definitions: defs, Accepted: accepted})
	adminKey := awssecretsmanager.NewSecret(stack, jsii.String("AdminKey"), &awssecretsmanager.SecretProps{
		SecretName:  jsii.String(resources.PhysicalName(cfg.Prefix(), "admin-key")),
		Description: jsii.String("Ferry " + cfg.Stage + " operator key (Authorization: Bearer <key> on operator routes)"),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(adminKeyLength),
			ExcludePunctuation: jsii.Bool(true),
			IncludeSpace:       jsii.Bool(false),
		},
		RemovalPolicy: removalPolicy(cfg),
	})
	// The Stripe endpoint's signing secret: the stack creates it with a random value, which no
	// Stripe signature matches (every Stripe delivery is refused, nothing is stored) until the
	// operator puts the endpoint's whsec_… secret in it.
	stripeSecret := awssecretsmanager.NewSecret(stack, jsii.String("StripeWebhookSecret"), &awssecretsmanager.SecretProps{
		SecretName:  jsii.String(resources.PhysicalName(cfg.Prefix(), "stripe-webhook-secret")),
		Description: jsii.String("Ferry " + cfg.Stage + " Stripe webhook signing secret (whsec_…): put the endpoint's secret from the Stripe dashboard here"),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(adminKeyLength),
			ExcludePunctuation: jsii.Bool(true),
			IncludeSpace:       jsii.Bool(false),
		},
		RemovalPolicy: removalPolicy(cfg),
	})
	accepted.accept(adminKey, "CKV_AWS_149", reasonSecretManagedKey)
	accepted.accept(stripeSecret, "CKV_AWS_149", reasonSecretManagedKey)
	secrets := map[string]awssecretsmanager.ISecret{
		resources.EnvAdminKeySecretARN:      adminKey,
		resources.EnvStripeWebhookSecretARN: stripeSecret,
	}
	if cfg.KindeClient() {
		secrets[resources.EnvKindeClientSecretARN] = importKindeClientSecret(stack, cfg)
	}
	if cfg.StripeAPIKeySecretARN != "" {
		secrets[resources.EnvStripeAPIKeySecretARN] = importSecret(stack, "StripeAPIKey", cfg.StripeAPIKeySecretARN)
	}
	functions, err := NewFunctions(stack, "Functions", &FunctionsProps{
		Config:       cfg,
		Definitions:  defs,
		Storage:      storage,
		Secrets:      secrets,
		SourceRoot:   props.SourceRoot,
		SourceDigest: digest,
		Accepted:     accepted,
	})
	if err != nil {
		return nil, err
	}
	api := NewHTTPAPI(stack, "Http", &HTTPAPIProps{Config: cfg, Routes: defs.Routes, Functions: functions.ByName, Accepted: accepted})
	alarms := NewAlarms(stack, "Alarms", &AlarmsProps{Config: cfg, Definitions: defs, Storage: storage, Functions: functions, Accepted: accepted})
	accepted.write()

	output := func(id, value, description string) {
		awscdk.NewCfnOutput(stack, jsii.String(id), &awscdk.CfnOutputProps{Value: jsii.String(value), Description: jsii.String(description)})
	}
	output("ApiUrl", *api.Stage.Url(), "Base URL of the HTTP API")
	output("AlarmTopicArn", *alarms.Topic.TopicArn(), "SNS topic every alarm notifies")
	output("AdminKeySecretArn", *adminKey.SecretArn(), "Secrets Manager secret holding the operator key")
	output("StripeWebhookSecretArn", *stripeSecret.SecretArn(), "Secrets Manager secret the Stripe webhook signing secret goes in")
	for _, t := range defs.Tables {
		output("Table"+pascal(t.Logical), *storage.Tables[t.Logical].TableName(), t.Purpose)
	}
	for _, q := range defs.Queues {
		output("Queue"+pascal(q.Logical)+"Url", *storage.Queues[q.Logical].QueueUrl(), q.Purpose)
		output("Queue"+pascal(q.DLQLogical())+"Url", *storage.Queues[q.DLQLogical()].QueueUrl(), "dead-letter queue of "+q.Logical)
	}
	output("QueueFailedRunsUrl", *storage.FailedRuns.QueueUrl(), "dead-letter queue of every scheduled run")
	for _, b := range defs.Buckets {
		output("Bucket"+pascal(b.Logical), *storage.Buckets[b.Logical].BucketName(), b.Purpose)
	}
	return stack, nil
}

// importKindeClientSecret refers to the Kinde client secret the kindeClientSecretArn context
// names. The stack does not own it: the operator creates it (and rotates it) in Secrets Manager,
// in the stack's account and region. A complete ARN is granted as it is; a partial one (no
// six-character suffix) is granted on the name followed by any suffix, which is how IAM matches
// it against the secret's complete ARN.
func importKindeClientSecret(scope constructs.Construct, cfg Config) awssecretsmanager.ISecret {
	return importSecret(scope, "KindeClientSecret", cfg.KindeClientSecretARN)
}

// importSecret refers to a secret the operator owns, by a complete or a partial ARN (see
// importKindeClientSecret).
func importSecret(scope constructs.Construct, id, arn string) awssecretsmanager.ISecret {
	if secretARNSuffix.MatchString(arn) {
		return awssecretsmanager.Secret_FromSecretCompleteArn(scope, jsii.String(id), jsii.String(arn))
	}
	return awssecretsmanager.Secret_FromSecretPartialArn(scope, jsii.String(id), jsii.String(arn))
}

// checkDeployable reports what the stack could not deploy safely: a function without code, or a
// queue consumer whose reserved concurrency is below the event source's maximum concurrency
// (SQS would keep receiving messages Lambda throttles, and throttled receives count toward
// maxReceiveCount, so events would reach the dead-letter queue without ever running).
func checkDeployable(cfg Config, defs Definitions, root string) error {
	var errs []error
	if root == "" {
		errs = append(errs, errors.New("no source root: the stack needs the module root to build the functions"))
	}
	for _, f := range defs.Functions {
		if root != "" {
			if err := checkFunctionSources(root, f.Name); err != nil {
				errs = append(errs, err)
			}
		}
		for logical, access := range f.Queues {
			if access.Consumes() && f.ReservedConcurrency > 0 && f.ReservedConcurrency < cfg.ConsumerMaxConcurrency {
				errs = append(errs, fmt.Errorf("function %q consumes queue %q with reserved concurrency %d below consumerMaxConcurrency %d", f.Name, logical, f.ReservedConcurrency, cfg.ConsumerMaxConcurrency))
			}
		}
	}
	return errors.Join(errs...)
}

func seconds(d time.Duration) awscdk.Duration {
	return awscdk.Duration_Seconds(jsii.Number(d.Seconds()))
}

func days(n int) awscdk.Duration {
	return awscdk.Duration_Days(jsii.Number(n))
}
