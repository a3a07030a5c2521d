package rehearsal

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cfntypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
)

// CDK's bootstrap, as `cdk bootstrap` leaves it in an account: the parameter the template's
// BootstrapVersion reads and the bucket its file assets are uploaded to.
const (
	bootstrapQualifier     = "hnb659fds"
	bootstrapVersionParam  = "/cdk-bootstrap/" + bootstrapQualifier + "/version"
	bootstrapVersion       = "30"
	stackOperationDeadline = 5 * time.Minute
	stackPollInterval      = 200 * time.Millisecond
)

// Bootstrap does in moto what `cdk bootstrap` does in an account, as far as the template needs:
// the version parameter and the assets bucket.
func Bootstrap(ctx context.Context, c Clients) error {
	if _, err := c.SSM.PutParameter(ctx, &ssm.PutParameterInput{
		Name: aws.String(bootstrapVersionParam), Value: aws.String(bootstrapVersion), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true),
	}); err != nil {
		return fmt.Errorf("bootstrap version parameter: %w", err)
	}
	if _, err := c.S3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(substitute("cdk-" + bootstrapQualifier + "-assets-${AWS::AccountId}-${AWS::Region}"))}); err != nil {
		return fmt.Errorf("bootstrap assets bucket: %w", err)
	}
	return nil
}

// substitute resolves the placeholders CDK's asset manifest uses.
func substitute(s string) string {
	return strings.NewReplacer("${AWS::AccountId}", Account, "${AWS::Region}", Region, "${AWS::Partition}", "aws").Replace(s)
}

// assetManifest is the part of <stack>.assets.json the upload reads.
type assetManifest struct {
	Files map[string]struct {
		Source struct {
			Path      string `json:"path"`
			Packaging string `json:"packaging"`
		} `json:"source"`
		Destinations map[string]struct {
			BucketName string `json:"bucketName"`
			ObjectKey  string `json:"objectKey"`
		} `json:"destinations"`
	} `json:"files"`
}

// UploadAssets puts each file asset where the template expects it, as `cdk deploy` does: a
// folder zipped, a file as it is. With placeholders, every folder asset is uploaded as an empty
// zip instead, enough for a function to be created but not run: the upgrade rehearsal runs no
// function, and its previous assembly is synthesized without bundling.
func UploadAssets(ctx context.Context, c Clients, a Assembly, placeholders bool) (int, error) {
	raw, err := os.ReadFile(filepath.Join(a.Dir, a.Stack+".assets.json"))
	if err != nil {
		return 0, fmt.Errorf("asset manifest: %w", err)
	}
	var m assetManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return 0, fmt.Errorf("asset manifest: %w", err)
	}
	n := 0
	for _, hash := range sortedKeys(m.Files) {
		f := m.Files[hash]
		src := filepath.Join(a.Dir, f.Source.Path)
		var body []byte
		switch {
		case f.Source.Packaging == "zip":
			body, err = zipFolder(src, placeholders)
		default:
			body, err = os.ReadFile(src)
		}
		if err != nil {
			return n, fmt.Errorf("asset %s (%s): %w", hash, f.Source.Path, err)
		}
		for _, d := range f.Destinations {
			if _, err := c.S3.PutObject(ctx, &s3.PutObjectInput{
				Bucket: aws.String(substitute(d.BucketName)), Key: aws.String(substitute(d.ObjectKey)), Body: bytes.NewReader(body),
			}); err != nil {
				return n, fmt.Errorf("upload asset %s: %w", hash, err)
			}
			n++
		}
	}
	return n, nil
}

// zipFolder zips a folder's files, as CDK packages a folder asset; a placeholder is an empty zip.
func zipFolder(dir string, placeholder bool) ([]byte, error) {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	if placeholder {
		if err := w.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := zip.FileInfoHeader(info)
		if err != nil {
			return err
		}
		h.Name, h.Method = filepath.ToSlash(rel), zip.Deflate
		out, err := w.CreateHeader(h)
		if err != nil {
			return err
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		_, err = out.Write(content)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// capabilities are what `cdk deploy` acknowledges for a stack with IAM roles of its own naming.
var capabilities = []cfntypes.Capability{cfntypes.CapabilityCapabilityIam, cfntypes.CapabilityCapabilityNamedIam}

// CreateStack creates the stack from a template and waits for CREATE_COMPLETE.
func CreateStack(ctx context.Context, c Clients, name string, template []byte) error {
	if _, err := c.CloudFormation.CreateStack(ctx, &cloudformation.CreateStackInput{
		StackName: aws.String(name), TemplateBody: aws.String(string(template)), Capabilities: capabilities,
	}); err != nil {
		return fmt.Errorf("create stack %s: %w", name, err)
	}
	return waitStack(ctx, c, name, cfntypes.StackStatusCreateComplete)
}

// UpdateStack updates the stack to a template and waits for UPDATE_COMPLETE.
func UpdateStack(ctx context.Context, c Clients, name string, template []byte) error {
	if _, err := c.CloudFormation.UpdateStack(ctx, &cloudformation.UpdateStackInput{
		StackName: aws.String(name), TemplateBody: aws.String(string(template)), Capabilities: capabilities,
	}); err != nil {
		return fmt.Errorf("update stack %s: %w", name, err)
	}
	return waitStack(ctx, c, name, cfntypes.StackStatusUpdateComplete)
}

func waitStack(ctx context.Context, c Clients, name string, want cfntypes.StackStatus) error {
	deadline := time.Now().Add(stackOperationDeadline)
	for {
		out, err := c.CloudFormation.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("describe stack %s: %w", name, err)
		}
		st := out.Stacks[0]
		switch {
		case st.StackStatus == want:
			return nil
		case strings.HasSuffix(string(st.StackStatus), "_IN_PROGRESS"):
		default:
			return fmt.Errorf("stack %s: %s (%s); want %s", name, st.StackStatus, aws.ToString(st.StackStatusReason), want)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stack %s: still %s after %s", name, st.StackStatus, stackOperationDeadline)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(stackPollInterval):
		}
	}
}

// Stack is what CloudFormation made of the template: each created resource's physical id and
// the outputs.
type Stack struct {
	Name     string
	Physical map[string]string // logical id → physical id
	Types    map[string]string // logical id → type, as moto reports it ("" for a skipped one)
	Outputs  map[string]string
}

// DescribeStack reads the stack's resources and outputs.
func DescribeStack(ctx context.Context, c Clients, name string) (Stack, error) {
	s := Stack{Name: name, Physical: map[string]string{}, Types: map[string]string{}, Outputs: map[string]string{}}
	pages := cloudformation.NewListStackResourcesPaginator(c.CloudFormation, &cloudformation.ListStackResourcesInput{StackName: aws.String(name)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return Stack{}, fmt.Errorf("list stack resources: %w", err)
		}
		for _, r := range page.StackResourceSummaries {
			id := aws.ToString(r.LogicalResourceId)
			s.Types[id] = aws.ToString(r.ResourceType)
			if typ := aws.ToString(r.ResourceType); typ != "" {
				s.Physical[id] = aws.ToString(r.PhysicalResourceId)
			}
		}
	}
	out, err := c.CloudFormation.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
	if err != nil {
		return Stack{}, fmt.Errorf("describe stack: %w", err)
	}
	for _, o := range out.Stacks[0].Outputs {
		s.Outputs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	return s, nil
}

// Created is the set of logical ids CloudFormation created.
func (s Stack) Created() map[string]bool {
	out := map[string]bool{}
	for id := range s.Physical {
		out[id] = true
	}
	return out
}

// CheckOutputs reports every output whose value did not resolve, unless it refers (in the
// template) to a resource of an unmodeled type, which moto cannot resolve.
func CheckOutputs(t Template, s Stack, unmodeled map[string]bool) (checked int, err error) {
	var errs []error
	for _, key := range sortedKeys(t.Outputs) {
		throughUnmodeled := false
		for _, id := range refs(t.Outputs[key]["Value"]) {
			throughUnmodeled = throughUnmodeled || unmodeled[t.Resources[id].Type]
		}
		if throughUnmodeled {
			continue
		}
		checked++
		if v, ok := s.Outputs[key]; !ok || unresolved(v) {
			errs = append(errs, fmt.Errorf("output %s resolved to %q", key, v))
		}
	}
	return checked, errors.Join(errs...)
}
