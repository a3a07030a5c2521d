// Package instrument is what measures and breaks Ferry from outside, on the SDK clients: request
// metering (round trips and request units per DynamoDB operation), call counting per service,
// fault injection (crashes before or after a DynamoDB call) and an IAM guard that refuses, on a
// function's clients, every call its grant would refuse in AWS. Tests, the benchmarks and ferry
// dev use it; no function links it (a test runs go list -deps on ./functions/... to hold that).
package instrument
