package rehearsal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// Region and Account are moto's defaults, which the stack's ARNs carry.
const (
	Region  = "us-east-1"
	Account = "123456789012"
)

// Bounds of the server's start and stop.
const (
	motoStartTimeout = 60 * time.Second
	motoStopTimeout  = 5 * time.Second
)

// adminUser is the IAM user the rehearsal deploys and inspects with once IAM is enforced: the
// operator's identity, allowed everything, as an administrator deploying a stack is.
const adminUser = "rehearsal-admin"

// Moto is one rehearsal server (scripts/rehearsal_server.py) on a free port of 127.0.0.1.
type Moto struct {
	URL   string
	cmd   *exec.Cmd
	log   *lockedBuffer
	admin aws.Credentials
}

// StartMoto starts the server with python (the rehearsal virtualenv's) and waits for its
// address. Stop it with Stop.
func StartMoto(python, script string) (*Moto, error) {
	cmd := exec.Command(python, script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start moto: %w", err)
	}
	m := &Moto{cmd: cmd, log: logs, admin: aws.Credentials{AccessKeyID: "bootstrap", SecretAccessKey: "bootstrap"}}
	addr := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		var first struct{ URL string }
		_ = json.Unmarshal([]byte(line), &first)
		addr <- first.URL
		_, _ = io.Copy(logs, r)
	}()
	select {
	case m.URL = <-addr:
	case <-time.After(motoStartTimeout):
	}
	if m.URL == "" {
		m.Stop()
		return nil, fmt.Errorf("moto did not print its address within %s:\n%s", motoStartTimeout, logs.String())
	}
	return m, nil
}

// Stop ends the server's process group.
func (m *Moto) Stop() {
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(motoStopTimeout):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Log is what the server wrote.
func (m *Moto) Log() string { return m.log.String() }

// config is an SDK configuration against the server, signed with creds.
func (m *Moto) config(creds aws.Credentials) aws.Config {
	return aws.Config{
		Region:       Region,
		Credentials:  credentials.StaticCredentialsProvider{Value: creds},
		BaseEndpoint: aws.String(m.URL),
		HTTPClient:   &http.Client{Timeout: 60 * time.Second},
		// No retries: a retried CreateStack after moto failed half way would answer
		// AlreadyExists and hide the failure.
		Retryer: func() aws.Retryer { return aws.NopRetryer{} },
	}
}

// Clients are the SDK clients the rehearsal itself uses, as the administrator.
type Clients struct {
	CloudFormation *cloudformation.Client
	DynamoDB       *dynamodb.Client
	IAM            *iam.Client
	Lambda         *lambda.Client
	S3             *s3.Client
	SecretsManager *secretsmanager.Client
	SQS            *sqs.Client
	SSM            *ssm.Client
	STS            *sts.Client
}

// Admin returns the administrator's clients.
func (m *Moto) Admin() Clients { return m.clients(m.admin) }

func (m *Moto) clients(creds aws.Credentials) Clients {
	cfg := m.config(creds)
	return Clients{
		CloudFormation: cloudformation.NewFromConfig(cfg),
		DynamoDB:       dynamodb.NewFromConfig(cfg),
		IAM:            iam.NewFromConfig(cfg),
		Lambda:         lambda.NewFromConfig(cfg),
		S3:             s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true }),
		SecretsManager: secretsmanager.NewFromConfig(cfg),
		SQS:            sqs.NewFromConfig(cfg),
		SSM:            ssm.NewFromConfig(cfg),
		STS:            sts.NewFromConfig(cfg),
	}
}

// CreateAdmin makes the administrator: an IAM user allowed every action, whose keys sign every
// later call of the rehearsal's own. It runs before IAM is enforced.
func (m *Moto) CreateAdmin(ctx context.Context) error {
	c := m.Admin().IAM
	if _, err := c.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(adminUser)}); err != nil {
		return fmt.Errorf("create the administrator: %w", err)
	}
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`
	if _, err := c.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: aws.String(adminUser), PolicyName: aws.String("administrator"), PolicyDocument: aws.String(policy)}); err != nil {
		return fmt.Errorf("allow the administrator: %w", err)
	}
	key, err := c.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(adminUser)})
	if err != nil {
		return fmt.Errorf("key the administrator: %w", err)
	}
	m.admin = aws.Credentials{AccessKeyID: aws.ToString(key.AccessKey.AccessKeyId), SecretAccessKey: aws.ToString(key.AccessKey.SecretAccessKey)}
	return nil
}

// EnforceIAM turns moto's IAM enforcement on from the next request (moto's reset-auth with an
// initial no-auth count of 0): from then on every call is signed by a known key and allowed by
// its identity's policies, or refused with AccessDenied.
func (m *Moto) EnforceIAM(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL+"/moto-api/reset-auth", strings.NewReader("0"))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("turn IAM enforcement on: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("turn IAM enforcement on: %s: %s", resp.Status, body)
	}
	return nil
}

// lockedBuffer collects output written from several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
