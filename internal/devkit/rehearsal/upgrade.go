package rehearsal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// dataHolding are the resource types whose replacement loses what they hold, each with the
// properties whose change makes CloudFormation replace the resource ("Update requires:
// Replacement" in each type's reference; createOnlyProperties in its registry schema; for a
// table, its key schema too). A resource of these types whose logical id disappears is replaced
// as well: the old one is deleted (or, retained, left behind) and a new, empty one created.
var dataHolding = map[string][]string{
	"AWS::DynamoDB::Table":        {"TableName", "KeySchema", "ImportSourceSpecification"},
	"AWS::S3::Bucket":             {"BucketName"},
	"AWS::SQS::Queue":             {"QueueName", "FifoQueue"},
	"AWS::SecretsManager::Secret": {"Name"},
	"AWS::Logs::LogGroup":         {"LogGroupName"},
}

// Replacement is a data-holding resource an update would replace, and why.
type Replacement struct {
	LogicalID, Type, Why string
}

func (r Replacement) String() string { return fmt.Sprintf("%s (%s): %s", r.LogicalID, r.Type, r.Why) }

// Replacements compares two templates and lists each data-holding resource of the first that
// updating to the second would replace: removed or renamed, changed type, a replacing property
// changed, or a key attribute's type changed.
func Replacements(from, to Template) []Replacement {
	var out []Replacement
	for _, id := range sortedKeys(from.Resources) {
		old := from.Resources[id]
		props, holds := dataHolding[old.Type]
		if !holds {
			continue
		}
		cur, ok := to.Resources[id]
		switch {
		case !ok:
			out = append(out, Replacement{id, old.Type, "the logical id is gone from the new template (renamed or removed): CloudFormation would delete it and create any successor empty"})
			continue
		case cur.Type != old.Type:
			out = append(out, Replacement{id, old.Type, "its type changes to " + cur.Type})
			continue
		}
		for _, p := range props {
			if !reflect.DeepEqual(old.Properties[p], cur.Properties[p]) {
				out = append(out, Replacement{id, old.Type, fmt.Sprintf("%s changes from %s to %s", p, compact(old.Properties[p]), compact(cur.Properties[p]))})
			}
		}
		if old.Type == "AWS::DynamoDB::Table" {
			for _, attr := range keyAttributes(old) {
				if a, b := attributeType(old, attr), attributeType(cur, attr); a != b && b != "" {
					out = append(out, Replacement{id, old.Type, fmt.Sprintf("key attribute %s changes type from %s to %s", attr, a, b)})
				}
			}
		}
	}
	return out
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func keyAttributes(r Resource) []string {
	var out []string
	ks, _ := r.Properties["KeySchema"].([]any)
	for _, k := range ks {
		if m, ok := k.(map[string]any); ok {
			if name, ok := m["AttributeName"].(string); ok {
				out = append(out, name)
			}
		}
	}
	return out
}

func attributeType(r Resource, name string) string {
	defs, _ := r.Properties["AttributeDefinitions"].([]any)
	for _, d := range defs {
		if m, ok := d.(map[string]any); ok && m["AttributeName"] == name {
			t, _ := m["AttributeType"].(string)
			return t
		}
	}
	return ""
}

// UpgradeOptions name what an upgrade rehearsal needs.
type UpgradeOptions struct {
	Python, Server string
	// Previous is the last release's (or the previous commit's) assembly, synthesized without
	// bundling; Current is this commit's.
	Previous, Current Assembly
	// Mutate, when set, changes the current template (the tests' failures).
	Mutate func(*Template)
	Log    func(format string, args ...any)
}

// UpgradeReport is what an upgrade rehearsal counted.
type UpgradeReport struct {
	Added, Removed, Kept int
	// Markers are the tables and buckets a marker was written to before the update and read
	// back after it.
	Markers int
}

// RehearseUpgrade refuses an update that would replace a data-holding resource, then deploys the
// previous template into a moto of its own, writes a marker into every table and bucket, updates
// the stack to the current template, and reads every marker back from the same physical
// resource.
func RehearseUpgrade(ctx context.Context, o UpgradeOptions) (UpgradeReport, error) {
	var rep UpgradeReport
	prev, prevRaw, err := loadTemplate(o.Previous, nil)
	if err != nil {
		return rep, fmt.Errorf("the previous template: %w", err)
	}
	cur, curRaw, err := loadTemplate(o.Current, o.Mutate)
	if err != nil {
		return rep, fmt.Errorf("the current template: %w", err)
	}
	for id := range cur.Resources {
		if _, ok := prev.Resources[id]; ok {
			rep.Kept++
		} else {
			rep.Added++
		}
	}
	rep.Removed = len(prev.Resources) - rep.Kept
	if r := Replacements(prev, cur); len(r) > 0 {
		lines := make([]string, len(r))
		for i, x := range r {
			lines[i] = "  " + x.String()
		}
		return rep, fmt.Errorf("the update would replace %d resource(s) that hold data:\n%s", len(r), strings.Join(lines, "\n"))
	}
	if err := CheckReferences(cur); err != nil {
		return rep, fmt.Errorf("the current template does not resolve:\n%w", err)
	}
	m, err := StartMoto(o.Python, o.Server)
	if err != nil {
		return rep, err
	}
	defer m.Stop()
	before, err := deploy(ctx, m, o.Previous, prevRaw, true)
	if err != nil {
		return rep, fmt.Errorf("deploy the previous template: %w\nmoto's log:\n%s", err, tail(m.Log()))
	}
	c := m.Admin()
	markers, err := writeMarkers(ctx, c, prev, before)
	if err != nil {
		return rep, err
	}
	if _, err := UploadAssets(ctx, c, o.Current, true); err != nil {
		return rep, err
	}
	if err := UpdateStack(ctx, c, o.Current.Stack, curRaw); err != nil {
		return rep, fmt.Errorf("%w\nmoto's log:\n%s", err, tail(m.Log()))
	}
	after, err := DescribeStack(ctx, c, o.Current.Stack)
	if err != nil {
		return rep, err
	}
	var errs []error
	for id, physical := range before.Physical {
		if _, holds := dataHolding[prev.Resources[id].Type]; holds && after.Physical[id] != physical {
			errs = append(errs, fmt.Errorf("%s: physical id %s became %q", id, physical, after.Physical[id]))
		}
	}
	for _, mk := range markers {
		if err := mk.check(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	if _, _, err := AccountFor(cur, after.Created(), Unmodeled()); err != nil {
		errs = append(errs, fmt.Errorf("after the update: %w", err))
	}
	rep.Markers = len(markers)
	o.Log("update from %d to %d resources (%d added, %d removed): no data-holding resource replaced; %d markers read back", len(prev.Resources), len(cur.Resources), rep.Added, rep.Removed, rep.Markers)
	return rep, errors.Join(errs...)
}

// marker is an item or object written before an update, read back after it.
type marker struct {
	what  string
	check func(context.Context, Clients) error
}

const markerValue = "rehearsal-upgrade-marker"

// writeMarkers writes one item into every table (its key attributes set to the marker) and one
// object into every bucket.
func writeMarkers(ctx context.Context, c Clients, t Template, s Stack) ([]marker, error) {
	var out []marker
	for _, id := range sortedKeys(t.Resources) {
		r := t.Resources[id]
		physical := s.Physical[id]
		switch r.Type {
		case "AWS::DynamoDB::Table":
			key := map[string]ddbtypes.AttributeValue{}
			for _, attr := range keyAttributes(r) {
				if attributeType(r, attr) == "N" {
					key[attr] = &ddbtypes.AttributeValueMemberN{Value: "7"}
				} else {
					key[attr] = &ddbtypes.AttributeValueMemberS{Value: markerValue}
				}
			}
			if _, err := c.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(physical), Item: key}); err != nil {
				return nil, fmt.Errorf("marker in %s: %w", physical, err)
			}
			out = append(out, marker{what: physical, check: func(ctx context.Context, c Clients) error {
				got, err := c.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(physical), Key: key, ConsistentRead: aws.Bool(true)})
				if err != nil || len(got.Item) == 0 {
					return fmt.Errorf("table %s lost the item written before the update (%v)", physical, err)
				}
				return nil
			}})
		case "AWS::S3::Bucket":
			if _, err := c.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(physical), Key: aws.String(markerValue), Body: strings.NewReader(markerValue)}); err != nil {
				return nil, fmt.Errorf("marker in %s: %w", physical, err)
			}
			out = append(out, marker{what: physical, check: func(ctx context.Context, c Clients) error {
				if _, err := c.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(physical), Key: aws.String(markerValue)}); err != nil {
					return fmt.Errorf("bucket %s lost the object written before the update (%v)", physical, err)
				}
				return nil
			}})
		}
	}
	return out, nil
}

// marshal writes a template back to JSON.
func marshal(t Template) ([]byte, error) { return json.MarshalIndent(t, "", " ") }

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
