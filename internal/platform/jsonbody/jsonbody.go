// Package jsonbody is Ferry's one strict JSON decoder. Every route that takes a JSON body reads it
// through Decode, and the CloudEvents parser checks event bodies with Check, so every input is
// held to the same rules before anything moves:
//
//   - the body is exactly one JSON value, and valid UTF-8 (RFC 8259 §8.1) — no invalid bytes,
//     no escaped lone surrogates (\ud800 is not a character), nothing after the value;
//   - no object, at any depth, names a member twice (RFC 7493, I-JSON);
//   - member names match exactly: "Amount" is not "amount";
//   - a member that is not a field of the request is refused, not ignored;
//   - a field marked required must be present, and null is never taken for a value unless the
//     field says so;
//   - an empty string is never taken for "not given": a string field that is sent must hold
//     something (as a query parameter sent empty is refused), unless the field says "" is a
//     value of its own;
//   - an integer field takes an integer literal only (not 7.5, 1e3 or "7"), and no number in a
//     request is larger in magnitude than MaxInteger (2^53−1), the largest integer every JSON
//     reader and every store Ferry runs on keeps exactly (I-JSON, RFC 7493 §2.2).
//
// The last two rules apply at any depth of the request's own fields; they do not reach into a
// field that keeps raw JSON (a CloudEvent's data, its extensions), whose values are the
// client's data, not Ferry's fields.
//
// A refusal is an *Error whose message says, in Ferry's words, which field is wrong and how —
// never the parser's internals or a slice of the body.
//
// The decoding itself is github.com/go-json-experiment/json, the module that mirrors the
// standard library's encoding/json/v2: it rejects duplicate names and invalid UTF-8 and matches
// names case-sensitively by default, which encoding/json (v1) does not.
package jsonbody

import (
	"bytes"
	jsonv1 "encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Struct tag options, in a `jsonbody:"…"` tag beside the `json` tag of a request field.
const (
	// TagRequired marks a field that must be present and not null.
	TagRequired = "required"
	// TagNullable marks a field that may be null (its type decides what null means).
	TagNullable = "nullable"
	// TagEmpty marks a string field for which "" is a value of its own (base64 of no bytes),
	// never "not given". Every other string field refuses "".
	TagEmpty = "empty"
)

// MaxInteger is the largest magnitude of a number in a request: 2^53−1. Above it a JSON number
// is no longer an exact integer for readers that hold numbers as IEEE 754 doubles (JavaScript,
// the local DynamoDB emulator), so a quantity above it would be stored or shown as another
// value (2^53+1 read back as 2^53). RFC 7493 (I-JSON) §2.2 sets the same bound.
const MaxInteger = 1<<53 - 1

// maxNameBytes bounds how much of a client's member name an error message repeats.
const maxNameBytes = 64

// Error is a body the decoder refused. Nothing was read from it.
type Error struct {
	// Field is the path of the member the problem is in ("amount", "limits.events"); empty when
	// it is the body as a whole.
	Field string
	// Reason says what is wrong, naming the field, in words meant for the client.
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// IsError reports whether err is a refusal of the decoder.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Check reports whether body is one strict JSON value: valid UTF-8 without escaped lone
// surrogates, no member name twice in any object, nothing but whitespace after the value.
func Check(body []byte) error {
	if len(trimSpace(body)) == 0 {
		return &Error{Reason: "the body is empty; send a JSON document"}
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if err := dec.SkipValue(); err != nil {
		return syntaxProblem(err, body)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return &Error{Reason: fmt.Sprintf("the body has more after its JSON value (at byte %d); send one JSON document", dec.InputOffset())}
	}
	return nil
}

// Decode reads body, which must be one JSON object, into the struct v points to, by the rules
// of the package. The struct's fields carry `json:"name"` tags, and `jsonbody:"required"` or
// `jsonbody:"nullable"` where the contract says so. A map field tagged `json:",embed"` collects
// the members no other field names, instead of having them refused.
func Decode(body []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("jsonbody: Decode needs a pointer to a struct, not %T", v)) // a programming error
	}
	if err := Check(body); err != nil {
		return err
	}
	if trimSpace(body)[0] != '{' {
		return &Error{Reason: "the body must be a JSON object"}
	}
	fields, collector := fieldsOf(t.Elem())
	if err := json.Unmarshal(body, v, json.RejectUnknownMembers(collector == nil)); err != nil {
		return semanticProblem(err, fields)
	}
	if err := checkPresence(body, fields); err != nil {
		return err
	}
	return checkValues(body, t.Elem())
}

// field is what the decoder knows of one struct field.
type field struct {
	name     string
	typ      reflect.Type
	required bool
	nullable bool
	// empty: "" is a value of this field (TagEmpty).
	empty bool
}

// fields are a request struct's fields in declaration order.
type fields []field

func (fs fields) byName(name string) (field, bool) {
	for _, f := range fs {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}

func (fs fields) names() string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// fieldsOf lists a struct's fields, and the type of the field that collects the members no
// other field names (nil if none: such members are refused).
func fieldsOf(t reflect.Type) (out fields, collector reflect.Type) {
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if strings.Contains(","+opts+",", ",embed,") && (sf.Type.Kind() == reflect.Map || sf.Type == jsontextValue) {
			collector = sf.Type
			if sf.Type.Kind() == reflect.Map {
				collector = sf.Type.Elem()
			}
			continue
		}
		if name == "-" && opts == "" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		f := field{name: name, typ: sf.Type}
		for _, opt := range strings.Split(sf.Tag.Get("jsonbody"), ",") {
			switch opt {
			case TagRequired:
				f.required = true
			case TagNullable:
				f.nullable = true
			case TagEmpty:
				f.empty = true
			case "":
			default:
				panic(fmt.Sprintf("jsonbody: field %s has an unknown option %q", sf.Name, opt)) // a programming error
			}
		}
		out = append(out, f)
	}
	return out, collector
}

// checkPresence refuses a missing required field and a null where null is not a value. The
// body has passed Check, so reading its top-level members cannot fail.
func checkPresence(body []byte, fs fields) error {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if _, err := dec.ReadToken(); err != nil {
		return syntaxProblem(err, body)
	}
	present := map[string]bool{}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return syntaxProblem(err, body)
		}
		name := tok.String()
		isNull := dec.PeekKind() == 'n'
		if err := dec.SkipValue(); err != nil {
			return syntaxProblem(err, body)
		}
		present[name] = true
		if f, ok := fs.byName(name); ok && isNull && !f.nullable {
			if f.required {
				return &Error{Field: name, Reason: fmt.Sprintf("%s is required and cannot be null", quote(name))}
			}
			return &Error{Field: name, Reason: fmt.Sprintf("%s cannot be null; leave it out instead", quote(name))}
		}
	}
	var missing []string
	for _, f := range fs {
		if f.required && !present[f.name] {
			missing = append(missing, quote(f.name))
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return &Error{Field: strings.Trim(missing[0], `"`), Reason: missing[0] + " is required"}
	default:
		return &Error{Reason: strings.Join(missing, ", ") + " are required"}
	}
}

// checkValues applies the rules on values the Go types cannot state: no empty string where a
// string field is sent, no number above MaxInteger in magnitude. It walks the body beside the
// type it was decoded into, so that it knows, at every depth, which field a value is for and
// skips what a field keeps as raw JSON. The body has passed Check and Unmarshal, so reading it
// cannot fail.
func checkValues(body []byte, t reflect.Type) error {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	return walkValue(dec, t, field{})
}

// walkValue checks the next value of dec, which is decoded into type t (nil when no Go type
// says what it is, as inside a type that decodes itself: every rule applies there) for field f.
func walkValue(dec *jsontext.Decoder, t reflect.Type, f field) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == jsontextValue || t == rawMessageV1 {
		return dec.SkipValue() // the client's own data, kept as sent
	}
	switch dec.PeekKind() {
	case '"':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if tok.String() == "" && !f.empty {
			return emptyString(pathOf(dec.StackPointer()), f)
		}
		return nil
	case '0':
		raw, err := dec.ReadValue()
		if err != nil {
			return err
		}
		if n, _ := strconv.ParseFloat(string(raw), 64); math.Abs(n) > MaxInteger {
			return outOfRange(pathOf(dec.StackPointer()))
		}
		return nil
	case '{':
		return walkObject(dec, t)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for dec.PeekKind() != ']' {
			if err := walkValue(dec, elem, field{}); err != nil {
				return err
			}
		}
		_, err := dec.ReadToken()
		return err
	}
	return dec.SkipValue()
}

// walkObject checks an object's members, each for the field (or map element) it decodes into.
func walkObject(dec *jsontext.Decoder, t reflect.Type) error {
	var (
		fs        fields
		collector reflect.Type
		elem      reflect.Type
	)
	switch {
	case t != nil && t.Kind() == reflect.Struct:
		fs, collector = fieldsOf(t)
	case t != nil && t.Kind() == reflect.Map:
		elem = t.Elem()
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		vt, vf := elem, field{}
		if t != nil && t.Kind() == reflect.Struct {
			if f, ok := fs.byName(tok.String()); ok {
				vt, vf = f.typ, f
			} else {
				vt = collector
			}
		}
		if err := walkValue(dec, vt, vf); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken()
	return err
}

// emptyString refuses "" for a field that is sent: "" is never "not given".
func emptyString(path string, f field) error {
	if f.required {
		return &Error{Field: path, Reason: fmt.Sprintf("%s is required and cannot be empty", quote(path))}
	}
	return &Error{Field: path, Reason: fmt.Sprintf("%s is empty; leave it out instead", quote(path))}
}

// outOfRange refuses a number above MaxInteger in magnitude.
func outOfRange(path string) error {
	return &Error{Field: path, Reason: fmt.Sprintf("%s is out of range: a number here is at most %d (2^53−1) in magnitude, the largest integer every JSON reader and store keeps exactly", quote(path), MaxInteger)}
}

// syntaxProblem explains a syntactic refusal.
func syntaxProblem(err error, body []byte) error {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return &Error{Reason: "the body ends before its JSON value does"}
		}
		return &Error{Reason: "the body is not valid JSON"}
	}
	path := pathOf(se.JSONPointer)
	where := "the body"
	if path != "" {
		where = quote(path)
	}
	switch {
	case errors.Is(se.Err, jsontext.ErrDuplicateName):
		return &Error{Field: path, Reason: fmt.Sprintf("%s appears more than once; each member name may appear once", where)}
	case invalidUTF8Before(body, se.ByteOffset):
		return &Error{Field: path, Reason: fmt.Sprintf("%s is not valid UTF-8", where)}
	case loneSurrogateAt(body, se.ByteOffset):
		return &Error{Field: path, Reason: fmt.Sprintf(`%s holds an escaped lone surrogate (\uD800–\uDFFF), which is not a character`, where)}
	case errors.Is(se.Err, io.ErrUnexpectedEOF):
		return &Error{Field: path, Reason: "the body ends before its JSON value does"}
	}
	if path != "" {
		return &Error{Field: path, Reason: fmt.Sprintf("the body is not valid JSON (at byte %d, in %s)", se.ByteOffset, where)}
	}
	return &Error{Reason: fmt.Sprintf("the body is not valid JSON (at byte %d)", se.ByteOffset)}
}

var (
	jsontextValue = reflect.TypeFor[jsontext.Value]()
	rawMessageV1  = reflect.TypeFor[jsonv1.RawMessage]()
	unmarshalerV1 = reflect.TypeFor[json.Unmarshaler]()
	unmarshalerV2 = reflect.TypeFor[json.UnmarshalerFrom]()
)

// semanticProblem explains a value that does not fit the request's fields.
func semanticProblem(err error, fs fields) error {
	var se *json.SemanticError
	if !errors.As(err, &se) {
		return &Error{Reason: "the body does not fit this request"}
	}
	path := pathOf(se.JSONPointer)
	if errors.Is(se.Err, json.ErrUnknownName) {
		reason := fmt.Sprintf("%s is not a field of this request", quote(path))
		switch {
		case se.JSONPointer.Parent() != "":
		case len(fs) == 0:
			reason += " (this request takes no fields)"
		default:
			reason += fmt.Sprintf(" (its fields are %s; names are case-sensitive)", fs.names())
		}
		return &Error{Field: path, Reason: reason}
	}
	if path == "" {
		return &Error{Reason: "the body must be a JSON object"}
	}
	if t := se.GoType; t != nil && se.Err != nil && (reflect.PointerTo(t).Implements(unmarshalerV1) || reflect.PointerTo(t).Implements(unmarshalerV2)) {
		// A field type with its own decoding says in its own words what it takes.
		return &Error{Field: path, Reason: fmt.Sprintf("%s is not valid: %s", quote(path), se.Err.Error())}
	}
	if errors.Is(se.Err, strconv.ErrRange) {
		return outOfRange(path)
	}
	return &Error{Field: path, Reason: fmt.Sprintf("%s must be %s", quote(path), kindOf(se.GoType))}
}

// kindOf names the JSON a Go type takes.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "a value of another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer (digits only: no fraction, no exponent, no quotes)"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "a value of another type"
}

// pathOf renders a JSON pointer as a dotted path: /limits/events is limits.events.
func pathOf(p jsontext.Pointer) string {
	var parts []string
	for tok := range p.Tokens() {
		parts = append(parts, tok)
	}
	return strings.Join(parts, ".")
}

// quote renders a name for a message: quoted and escaped, so a client's control characters or
// invalid bytes never reach a log or a terminal raw, and cut to maxNameBytes.
func quote(name string) string {
	if len(name) > maxNameBytes {
		cut := maxNameBytes
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		return strconv.Quote(name[:cut]) + "…"
	}
	return strconv.Quote(name)
}

// invalidUTF8Before reports whether the body has an invalid UTF-8 sequence at or after offset:
// the parser stopped there, at the string that holds it.
func invalidUTF8Before(body []byte, offset int64) bool {
	if utf8.Valid(body) {
		return false
	}
	for i := 0; i < len(body); {
		r, size := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && size == 1 {
			return int64(i) >= offset
		}
		i += size
	}
	return false
}

// loneSurrogateAt reports whether the escape at offset is a \u escape of a surrogate half that
// is not part of a valid pair: the reason the parser stopped there.
func loneSurrogateAt(body []byte, offset int64) bool {
	if offset < 0 || offset >= int64(len(body)) {
		return false
	}
	first, ok := escapedUnit(body[offset:])
	if !ok || first < 0xD800 || first > 0xDFFF {
		return false
	}
	if first >= 0xDC00 {
		return true // a low half cannot start a pair
	}
	if offset+6 > int64(len(body)) {
		return true
	}
	second, ok := escapedUnit(body[offset+6:])
	return !ok || second < 0xDC00 || second > 0xDFFF
}

// escapedUnit reads a \uXXXX escape at the start of b.
func escapedUnit(b []byte) (uint64, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	return n, err == nil
}

// Empty reports whether a body is empty for a route whose body is optional: nothing but JSON's
// whitespace (RFC 8259 §2: space, tab, CR, LF). Any other byte — a form feed, a vertical tab,
// U+00A0 — is a body, which Decode then refuses; it is never read as no body.
func Empty(body []byte) bool { return len(trimSpace(body)) == 0 }

// trimSpace trims JSON's whitespace (RFC 8259 §2), and nothing else.
func trimSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\r\n")
}
