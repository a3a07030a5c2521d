package resources

import (
	"fmt"
	"sort"
	"strings"
)

// covers reports whether a resource granted at access a may be used at access need: read-write
// covers read, consume-send covers consume and send; send and consume cover only themselves.
func (a Access) covers(need Access) bool {
	return a == need || (a == ReadWrite && need == Read) || (a == ConsumeAndSend && (need == Consume || need == Send))
}

// Grant is what one function's entry grants: the physical names of exactly the resources it
// lists, each at its access level. A function's builder asks it for every resource it uses, at
// the access it needs; anything the entry does not grant, or grants with less access, is an error
// that names the function and the resource — at build time, never as an AccessDenied in AWS.
type Grant struct {
	fn    Function
	names Names
}

// Grant returns fn's grant over n. It fails, naming each one, when n lacks a resource fn lists.
func (n Names) Grant(fn Function) (Grant, error) {
	g := Grant{fn: fn, names: Names{Tables: map[string]string{}, Queues: map[string]string{}, Buckets: map[string]string{}}}
	var missing []string
	pick := func(kind string, granted map[string]Access, from, into map[string]string) {
		for _, logical := range sortedKeys(granted) {
			if v, ok := from[logical]; ok && v != "" {
				into[logical] = v
			} else {
				missing = append(missing, strings.ToLower(kind)+" "+logical)
			}
		}
	}
	pick(KindTable, fn.Tables, n.Tables, g.names.Tables)
	pick(KindQueue, fn.Queues, n.Queues, g.names.Queues)
	pick(KindBucket, fn.Buckets, n.Buckets, g.names.Buckets)
	if len(missing) > 0 {
		return Grant{}, fmt.Errorf("function %s: no physical name for %s", fn.Name, strings.Join(missing, ", "))
	}
	return g, nil
}

// Only returns the names in n of the resources fn's entry lists, and no others (a listed
// resource n lacks is left out: Grant is the check that names it).
func (n Names) Only(fn Function) Names {
	only := Names{Tables: map[string]string{}, Queues: map[string]string{}, Buckets: map[string]string{}}
	pick := func(granted map[string]Access, from, into map[string]string) {
		for logical := range granted {
			if v, ok := from[logical]; ok {
				into[logical] = v
			}
		}
	}
	pick(fn.Tables, n.Tables, only.Tables)
	pick(fn.Queues, n.Queues, only.Queues)
	pick(fn.Buckets, n.Buckets, only.Buckets)
	return only
}

// GrantFromEnv reads the physical names of what fn is granted, and nothing else, from the
// environment (lookup; nil reads the process's). A missing variable is an error naming it, so a
// misconfigured function fails at start, not on its first request.
func GrantFromEnv(fn Function, lookup func(string) (string, bool)) (Grant, error) {
	n := Names{Tables: map[string]string{}, Queues: map[string]string{}, Buckets: map[string]string{}}
	var missing []string
	get := func(kind string, granted map[string]Access, into map[string]string) {
		for _, logical := range sortedKeys(granted) {
			v, ok := lookup(EnvVar(kind, logical))
			if !ok || v == "" {
				missing = append(missing, EnvVar(kind, logical))
				continue
			}
			into[logical] = v
		}
	}
	if lookup == nil {
		lookup = lookupEnv
	}
	get(KindTable, fn.Tables, n.Tables)
	get(KindQueue, fn.Queues, n.Queues)
	get(KindBucket, fn.Buckets, n.Buckets)
	if len(missing) > 0 {
		return Grant{}, fmt.Errorf("function %s: missing environment: %s", fn.Name, strings.Join(missing, ", "))
	}
	return n.Grant(fn)
}

// Function is the entry the grant belongs to.
func (g Grant) Function() Function { return g.fn }

// Names are the physical names of the granted resources only.
func (g Grant) Names() Names { return g.names }

// Table returns the physical name of a table the entry grants at access need (Read or
// ReadWrite).
func (g Grant) Table(logical string, need Access) (string, error) {
	return g.lookup(KindTable, logical, need, g.fn.Tables, g.names.Tables)
}

// QueueURL returns the URL of a queue the entry grants at access need (Send or Consume).
func (g Grant) QueueURL(logical string, need Access) (string, error) {
	return g.lookup(KindQueue, logical, need, g.fn.Queues, g.names.Queues)
}

// Bucket returns the physical name of a bucket the entry grants at access need (Read or
// ReadWrite).
func (g Grant) Bucket(logical string, need Access) (string, error) {
	return g.lookup(KindBucket, logical, need, g.fn.Buckets, g.names.Buckets)
}

func (g Grant) lookup(kind, logical string, need Access, granted map[string]Access, names map[string]string) (string, error) {
	have, ok := granted[logical]
	switch {
	case !ok:
		return "", fmt.Errorf("function %s uses %s %s (%s), which its entry in resources.Functions does not grant",
			g.fn.Name, strings.ToLower(kind), logical, need)
	case !have.covers(need):
		return "", fmt.Errorf("function %s uses %s %s for %s, and its entry grants only %s",
			g.fn.Name, strings.ToLower(kind), logical, need, have)
	}
	return names[logical], nil
}

func sortedKeys(m map[string]Access) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
