package dynamo

import (
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// S is a string attribute value.
func S(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// N is a number attribute value. Ferry stores only integers: counts, token units, epoch
// milliseconds and micro-units of money.
func N(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// Int reads an integer attribute; a missing or non-number attribute reads as 0.
func Int(item map[string]types.AttributeValue, name string) int64 {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		// Numbers Ferry writes are integers; a decimal means someone else wrote the item.
		f, ferr := strconv.ParseFloat(v.Value, 64)
		if ferr != nil {
			return 0
		}
		return int64(f)
	}
	return n
}

// Str reads a string attribute; a missing one reads as "".
func Str(item map[string]types.AttributeValue, name string) string {
	v, ok := item[name].(*types.AttributeValueMemberS)
	if !ok {
		return ""
	}
	return v.Value
}

// Has reports whether the item carries the attribute.
func Has(item map[string]types.AttributeValue, name string) bool {
	_, ok := item[name]
	return ok
}

// Names returns the ExpressionAttributeNames for expressions written with a '#' before every
// attribute name ("#status = :inserting"): each "#name" maps to "name". Writing every name as an
// alias keeps expressions clear of DynamoDB's reserved words (status, cycle, plan, data…), and
// deriving the map from the expressions keeps it free of unused aliases, which DynamoDB refuses.
// It returns nil when no expression names an attribute.
func Names(expressions ...string) map[string]string {
	var names map[string]string
	for _, expr := range expressions {
		for i := 0; i < len(expr); i++ {
			if expr[i] != '#' {
				continue
			}
			j := i + 1
			for j < len(expr) && isNameByte(expr[j]) {
				j++
			}
			if j > i+1 {
				if names == nil {
					names = map[string]string{}
				}
				names[expr[i:j]] = expr[i+1 : j]
			}
			i = j - 1
		}
	}
	return names
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
