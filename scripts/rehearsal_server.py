"""moto's server for `make deploy-rehearsal`: every service on one port of 127.0.0.1, with
CloudFormation, and IAM enforced the way AWS enforces it on what Ferry's functions call.

It is moto_server.py (the same serialized DynamoDB, transactions with an undo log and idempotent
ClientRequestTokens) with six changes, each closing a gap of moto 5.2.5 found while rehearsing
the stack; each one is named in docs/deploy-rehearsal.md:

- AWS::SecretsManager::Secret is created by CloudFormation. moto's CloudFormation has no model
  for it (moto.cloudformation.parsing.resource_class_from_type returns None and the resource is
  skipped, so the functions' FERRY_*_SECRET_ARN variables resolve to nothing). The model here
  creates the secret in moto's Secrets Manager, with GenerateSecretString honoured.
- DynamoDB, Secrets Manager and batched SQS calls are authorized per action and resource, as AWS
  does. moto checks every request as one action on resource "*" unless the service names its
  resource (moto.core.responses.BaseResponse.call_action: only SQS, IAM and STS define
  _determine_resource; S3 has its own), so a least-privilege grant on a table ARN matches no
  DynamoDB request and everything is denied. AWS authorizes TransactWriteItems by each item's
  action on each item's table, Query on an index by the index's ARN, and SendMessageBatch by
  sqs:SendMessage (the IAM reference's "Actions defined by Amazon DynamoDB" and SQS's batch
  actions); the checks below do the same, with moto's own policy evaluation.
- A queue with an event source mapping is not drained by moto: moto's SQS invokes the mapped
  function itself on every send (moto.sqs.models.Queue.add_message, through Docker). The
  rehearsal plays Lambda's poller instead, with the function's own role, so the batch the worker
  gets is the one the stack's queue holds.
- AWS::KMS::Key takes its Tags as CloudFormation writes them ({"Key", "Value"}); moto's model
  hands them to KMS's tagger, which reads {"TagKey", "TagValue"} (moto.kms.models.Key.
  create_from_cloudformation_json), and fails with KeyError: 'TagKey' on any tagged key.
- An update keeps a resource whose model cannot update it. moto's ResourceMap.update stores what
  parse_and_update_resource returns, and that is None for a model with no
  update_from_cloudformation_json (AWS::Logs::LogGroup among them): the resource drops out of the
  stack, and the next Fn::GetAtt on it fails the update ("references undefined resource").
  CloudFormation would update such a resource in place; here it stays as it was created.
- An update of a bucket CloudFormation named keeps its name. moto's S3 model
  (FakeBucket.update_from_cloudformation_json) tags the bucket named by the BucketName property,
  which a bucket named by CloudFormation does not have: KeyError 'BucketName' on any update of a
  tagged, unnamed bucket. The property is filled in with the bucket's name, which also tells moto
  (rightly) that nothing requires replacing it.

IAM enforcement starts when the rehearsal says so (moto's own POST /moto-api/reset-auth): the
deployment runs as an administrator would, then every call the functions make is checked.
"""

import json
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import moto_server  # noqa: E402  (the test-moto server: its DynamoDB fixes are reused as they are)

from moto import settings  # noqa: E402
from moto.cloudformation import parsing  # noqa: E402
from moto.core.authorization import ActionAuthenticatorMixin  # noqa: E402
from moto.core.common_models import CloudFormationModel  # noqa: E402
from moto.dynamodb.responses import DynamoHandler  # noqa: E402
from moto.iam.access_control import IAMRequest  # noqa: E402
from moto.kms import models as kms_models  # noqa: E402
from moto.s3 import models as s3_models  # noqa: E402
from moto.moto_server.werkzeug_app import (  # noqa: E402
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.secretsmanager.models import secretsmanager_backends  # noqa: E402
from moto.secretsmanager.responses import SecretsManagerResponse  # noqa: E402
from moto.sqs import models as sqs_models  # noqa: E402
from moto.sqs.responses import SQSResponse  # noqa: E402
from werkzeug.serving import ThreadedWSGIServer, make_server  # noqa: E402


class Secret(CloudFormationModel):
    """AWS::SecretsManager::Secret in moto's Secrets Manager. Ref is the secret's ARN, as in
    CloudFormation."""

    # moto's model metaclass files each model under the service its module names.
    __module__ = "moto.secretsmanager.models"

    def __init__(self, arn, name):
        self.arn = arn
        self.name = name

    @property
    def physical_resource_id(self):
        return self.arn

    @staticmethod
    def cloudformation_name_type():
        return "Name"

    @staticmethod
    def cloudformation_type():
        return "AWS::SecretsManager::Secret"

    @classmethod
    def has_cfn_attr(cls, attr):
        return attr in ("Id",)

    def get_cfn_attribute(self, attribute_name):
        if attribute_name == "Id":
            return self.arn
        raise NotImplementedError(attribute_name)

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        props = cloudformation_json.get("Properties", {})
        backend = secretsmanager_backends[account_id][region_name]
        name = props.get("Name", resource_name)
        value = props.get("SecretString")
        generate = props.get("GenerateSecretString")
        if value is None and generate is not None:
            value = backend.get_random_password(
                password_length=int(generate.get("PasswordLength", 32)),
                exclude_characters=generate.get("ExcludeCharacters", ""),
                exclude_numbers=_flag(generate, "ExcludeNumbers"),
                exclude_punctuation=_flag(generate, "ExcludePunctuation"),
                exclude_uppercase=_flag(generate, "ExcludeUppercase"),
                exclude_lowercase=_flag(generate, "ExcludeLowercase"),
                include_space=_flag(generate, "IncludeSpace"),
                require_each_included_type=_flag(generate, "RequireEachIncludedType", True),
            )
            value = json.loads(value)["RandomPassword"] if value.startswith("{") else value
        out = json.loads(backend.create_secret(
            name=name, secret_string=value, secret_binary=None, description=props.get("Description"),
            tags=props.get("Tags"), kms_key_id=props.get("KmsKeyId"), client_request_token=None,
            replica_regions=[], force_overwrite=False,
        ))
        return cls(out["ARN"], name)

    @classmethod
    def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
        # Name is the only property whose change replaces a secret; the others (description,
        # tags) change nothing the rehearsal reads.
        props = cloudformation_json.get("Properties", {})
        if props.get("Name", original_resource.name) != original_resource.name:
            cls.delete_from_cloudformation_json(original_resource.name, {}, account_id, region_name)
            return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)
        return original_resource

    @classmethod
    def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
        secretsmanager_backends[account_id][region_name].delete_secret(
            secret_id=resource_name, recovery_window_in_days=None, force_delete_without_recovery=True)


def _flag(props, key, default=False):
    v = props.get(key, default)
    return v if isinstance(v, bool) else str(v).lower() == "true"


def authorize(response, checks):
    """Checks the request's signature once, then each (action, resource ARN) against the caller's
    policies, as moto's ActionAuthenticatorMixin._authenticate_and_authorize_action does for one
    action on one resource. Before enforcement starts it only counts the request, as moto does."""
    if ActionAuthenticatorMixin.request_count < settings.INITIAL_NO_AUTH_ACTION_COUNT:
        ActionAuthenticatorMixin.request_count += 1
        return
    path = response.raw_path
    signed = False
    for action, resource in checks:
        request = IAMRequest(
            account_id=response.current_account, method=response.method, path=path, data=response.data,
            body=response.raw_body, headers=response.headers, action=action,
        )
        if not signed:
            request.check_signature()
            signed = True
        request.check_action_permitted(resource)


def _body(response):
    try:
        return json.loads(response.raw_body or b"{}")
    except ValueError:
        return {}


def dynamodb_checks(response):
    """What AWS authorizes for one DynamoDB request: the action on the table (or the index a
    Query or Scan names); a transaction or a batch by each item's action on each item's table."""
    action, body = response._get_action(), _body(response)
    prefix = f"arn:aws:dynamodb:{response.region}:{response.current_account}:table/"
    if action == "TransactWriteItems":
        names = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}
        return [(names[op], prefix + item[op]["TableName"]) for item in body.get("TransactItems", []) for op in item]
    if action == "TransactGetItems":
        return [("GetItem", prefix + item["Get"]["TableName"]) for item in body.get("TransactItems", [])]
    if action in ("BatchGetItem", "BatchWriteItem"):
        return [(action, prefix + table) for table in body.get("RequestItems", {})]
    table = body.get("TableName", "*")
    if action in ("Query", "Scan") and body.get("IndexName"):
        return [(action, prefix + table + "/index/" + body["IndexName"])]
    return [(action, prefix + table if table != "*" else "*")]


def secrets_checks(response):
    """A secret is authorized on its complete ARN, however the caller named it."""
    body = _body(response)
    secret_id = body.get("SecretId", "*")
    try:
        secret_id = secretsmanager_backends[response.current_account][response.region].describe_secret(secret_id).arn
    except Exception:
        pass  # an unknown secret: the call itself answers ResourceNotFound after authorization
    return [(response._get_action(), secret_id)]


# SQS authorizes each batch action by the single message's action.
SQS_BATCH_ACTIONS = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def sqs_checks(response, resource):
    action = response._get_action()
    return [(SQS_BATCH_ACTIONS.get(action, action), resource)]


def enforce_iam_like_aws():
    DynamoHandler._authenticate_and_authorize_normal_action = lambda self, resource="*": authorize(self, dynamodb_checks(self))
    SecretsManagerResponse._authenticate_and_authorize_normal_action = lambda self, resource="*": authorize(self, secrets_checks(self))
    SQSResponse._authenticate_and_authorize_normal_action = lambda self, resource="*": authorize(self, sqs_checks(self, resource))


def tag_keys_as_kms_reads_them():
    original = kms_models.Key.create_from_cloudformation_json.__func__

    def create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        props = cloudformation_json.get("Properties", {})
        props["Tags"] = [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in props.get("Tags", [])]
        return original(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)

    kms_models.Key.create_from_cloudformation_json = classmethod(create)


def keep_what_moto_cannot_update():
    original = parsing.parse_and_update_resource

    def update(logical_id, resource_json, resources_map, account_id, region_name):
        updated = original(logical_id, resource_json, resources_map, account_id, region_name)
        if updated is None:
            return resources_map._parsed_resources.get(logical_id)
        return updated

    parsing.parse_and_update_resource = update


def keep_bucket_names_on_update():
    original = s3_models.FakeBucket.update_from_cloudformation_json.__func__

    def update(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
        cloudformation_json.setdefault("Properties", {}).setdefault("BucketName", original_resource.name)
        return original(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name)

    s3_models.FakeBucket.update_from_cloudformation_json = classmethod(update)


def leave_queues_to_the_poller():
    """moto's queues drop their event source mappings: Queue.__init__ sets the dict, and
    EventSourceMapping adds itself to it; both now land in a dict no one reads."""
    sqs_models.Queue.lambda_event_source_mappings = property(lambda self: {}, lambda self, value: None)


def main():
    moto_server.undo_log_transactions()
    enforce_iam_like_aws()
    tag_keys_as_kms_reads_them()
    keep_what_moto_cannot_update()
    keep_bucket_names_on_update()
    leave_queues_to_the_poller()
    # The model list is cached on first use: make sure it is built with Secret in it.
    parsing.get_model_list.cache_clear()
    parsing.get_model_map.cache_clear()
    parsing.get_name_type_map.cache_clear()
    host = os.environ.get("MOTO_HOST", "127.0.0.1")
    dispatcher = DomainDispatcherApplication(create_backend_app)
    ThreadedWSGIServer.request_queue_size = 4096
    server = make_server(
        host, 0, moto_server.SerializeDynamoDB(dispatcher), threaded=True, request_handler=MotoRequestHandler
    )
    os.environ["MOTO_PORT"] = str(server.port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Thread(target=moto_server.exit_with_parent, daemon=True).start()
    print(json.dumps({"url": f"http://{host}:{server.port}"}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
