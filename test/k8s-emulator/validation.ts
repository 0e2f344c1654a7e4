/**
 * What the emulator refuses, as a real API server would. TEST-ONLY: never shipped.
 *
 * - Types, required fields, enums and resource quantities: Kubernetes' own published OpenAPI
 *   schema, as compiled by the `kubernetes-models` package (one validator per kind).
 * - Unknown fields (refused as by a server asked for `fieldValidation=Strict`): the OpenAPI
 *   schema does not close its objects, so the known field names come from the same schema as
 *   generated into `@kubernetes/client-node`'s models (each model's attribute type map), walked
 *   recursively.
 * - Names, label and annotation syntax, and the rules the server checks in code rather than in
 *   the schema (a Pod has at least one container, container names are DNS labels and unique),
 *   written after apimachinery's validation rules.
 */
import * as models from '@kubernetes/client-node';
import { validate as validatePod } from 'kubernetes-models/_schemas/IoK8sApiCoreV1Pod';
import { validate as validateService } from 'kubernetes-models/_schemas/IoK8sApiCoreV1Service';
import { validate as validateNetworkPolicy } from 'kubernetes-models/_schemas/IoK8sApiNetworkingV1NetworkPolicy';

export type Kind = 'Pod' | 'Service' | 'NetworkPolicy';

/** One refusal, as a `StatusCause`. */
export interface Cause {
  reason:
    | 'FieldValueInvalid'
    | 'FieldValueRequired'
    | 'FieldValueTooLong'
    | 'FieldValueDuplicate'
    | 'UnknownField';
  field: string;
  message: string;
}

interface SchemaError {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}
type CompiledValidator = ((data: unknown) => boolean) & { errors?: SchemaError[] | null };

const SCHEMAS: Record<Kind, { validate: CompiledValidator; model: string }> = {
  Pod: { validate: validatePod as CompiledValidator, model: 'V1Pod' },
  Service: { validate: validateService as CompiledValidator, model: 'V1Service' },
  NetworkPolicy: { validate: validateNetworkPolicy as CompiledValidator, model: 'V1NetworkPolicy' },
};

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
/** The server caps the sum of all annotation keys and values of one object. */
const TOTAL_ANNOTATION_BYTES = 256 * 1024;

export function isDnsLabel(value: string): boolean {
  return value.length <= 63 && DNS1123_LABEL.test(value);
}

export function isDnsSubdomain(value: string): boolean {
  return value.length <= 253 && DNS1123_SUBDOMAIN.test(value);
}

/** A label or annotation key: an optional DNS-subdomain prefix and `/`, then a name of at most 63. */
export function qualifiedNameProblem(key: string): string | null {
  const parts = key.split('/');
  if (parts.length > 2) return 'a qualified name must have at most one "/"';
  const name = parts.length === 2 ? parts[1]! : parts[0]!;
  if (parts.length === 2 && !isDnsSubdomain(parts[0]!))
    return 'prefix part must be a lowercase RFC 1123 subdomain';
  if (name.length === 0) return 'name part must be non-empty';
  if (name.length > 63) return 'name part must be no more than 63 characters';
  if (!QUALIFIED_NAME.test(name)) {
    return "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
  }
  return null;
}

export function labelValueProblem(value: string): string | null {
  if (value.length > 63) return 'must be no more than 63 characters';
  if (!LABEL_VALUE.test(value)) {
    return "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
  }
  return null;
}

/** Checks one object of `kind` as the server would on create; an empty list means accepted. */
export function validateObject(kind: Kind, object: unknown): Cause[] {
  const causes: Cause[] = [];
  const { validate, model } = SCHEMAS[kind];
  if (!validate(object)) {
    // `oneOf` only repeats what its branches said (an int-or-string that is neither).
    for (const error of validate.errors ?? []) if (error.keyword !== 'oneOf') causes.push(schemaCause(error));
  }
  unknownFields(object, model, '', causes);
  if (typeof object === 'object' && object !== null) {
    checkMetadata(kind, (object as { metadata?: unknown }).metadata, causes);
    if (kind === 'Pod') checkPodSpec((object as { spec?: unknown }).spec, causes);
  }
  return causes;
}

function schemaCause(error: SchemaError): Cause {
  const field = error.instancePath
    .replace(/^\//, '')
    .replace(/\/(\d+)(?=\/|$)/g, '[$1]')
    .replaceAll('/', '.');
  if (error.keyword === 'required') {
    const missing = String(error.params.missingProperty);
    return {
      reason: 'FieldValueRequired',
      field: field === '' ? missing : `${field}.${missing}`,
      message: 'Required value',
    };
  }
  const detail =
    error.keyword === 'format'
      ? `must match the format "${String(error.params.format)}"`
      : error.keyword === 'enum'
        ? `supported values: ${JSON.stringify(error.params.allowedValues)}`
        : error.keyword === 'type'
          ? `must be of type ${String(error.params.type)}`
          : (error.message ?? error.keyword);
  return { reason: 'FieldValueInvalid', field, message: `Invalid value: ${detail}` };
}

type AttributeType = { baseName: string; type: string };
type ModelClass = { getAttributeTypeMap?: () => AttributeType[] };

function attributeMap(modelName: string): Map<string, string> | null {
  const modelClass = (models as unknown as Record<string, ModelClass | undefined>)[modelName];
  const attributes = modelClass?.getAttributeTypeMap?.();
  if (attributes === undefined) return null;
  return new Map(attributes.map((attribute) => [attribute.baseName, attribute.type]));
}

/** Reports every field the schema does not declare, at any depth. */
function unknownFields(value: unknown, type: string, path: string, causes: Cause[]): void {
  if (value === null || value === undefined) return;
  const arrayOf = /^Array<(.+)>$/.exec(type);
  if (arrayOf !== null) {
    if (Array.isArray(value))
      value.forEach((item, index) => {
        unknownFields(item, arrayOf[1]!, `${path}[${index}]`, causes);
      });
    return;
  }
  const mapOf = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (mapOf !== null) {
    if (typeof value === 'object' && !Array.isArray(value)) {
      for (const [key, item] of Object.entries(value))
        unknownFields(item, mapOf[1]!, `${path}[${key}]`, causes);
    }
    return;
  }
  if (typeof value !== 'object' || Array.isArray(value)) return;
  const attributes = attributeMap(type);
  if (attributes === null) return; // a scalar, IntOrString, or free-form (`any`)
  for (const [key, item] of Object.entries(value)) {
    const field = path === '' ? key : `${path}.${key}`;
    const itemType = attributes.get(key);
    if (itemType === undefined) {
      causes.push({ reason: 'UnknownField', field, message: `unknown field "${field}"` });
      continue;
    }
    unknownFields(item, itemType, field, causes);
  }
}

function checkMetadata(kind: Kind, metadata: unknown, causes: Cause[]): void {
  if (typeof metadata !== 'object' || metadata === null) {
    causes.push({
      reason: 'FieldValueRequired',
      field: 'metadata.name',
      message: 'name or generateName is required',
    });
    return;
  }
  const { name, generateName, labels, annotations } = metadata as {
    name?: unknown;
    generateName?: unknown;
    labels?: Record<string, unknown>;
    annotations?: Record<string, unknown>;
  };
  if (typeof name !== 'string' && typeof generateName !== 'string') {
    causes.push({
      reason: 'FieldValueRequired',
      field: 'metadata.name',
      message: 'name or generateName is required',
    });
  }
  if (typeof name === 'string') {
    // Services are DNS labels (they become DNS names); Pods and policies DNS subdomains.
    const valid = kind === 'Service' ? isDnsLabel(name) : isDnsSubdomain(name);
    if (!valid) {
      causes.push({
        reason: 'FieldValueInvalid',
        field: 'metadata.name',
        message: `Invalid value: "${name}": a lowercase RFC 1123 ${kind === 'Service' ? 'label' : 'subdomain'} must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character`,
      });
    }
  }
  for (const [key, value] of Object.entries(labels ?? {})) {
    const keyProblem = qualifiedNameProblem(key);
    if (keyProblem !== null) {
      causes.push({
        reason: 'FieldValueInvalid',
        field: 'metadata.labels',
        message: `Invalid value: "${key}": ${keyProblem}`,
      });
    }
    const valueProblem = typeof value === 'string' ? labelValueProblem(value) : 'must be a string';
    if (valueProblem !== null) {
      causes.push({
        reason: 'FieldValueInvalid',
        field: `metadata.labels[${key}]`,
        message: `Invalid value: "${String(value)}": ${valueProblem}`,
      });
    }
  }
  let annotationBytes = 0;
  for (const [key, value] of Object.entries(annotations ?? {})) {
    const keyProblem = qualifiedNameProblem(key);
    if (keyProblem !== null) {
      causes.push({
        reason: 'FieldValueInvalid',
        field: 'metadata.annotations',
        message: `Invalid value: "${key}": ${keyProblem}`,
      });
    }
    annotationBytes += Buffer.byteLength(key) + Buffer.byteLength(String(value));
  }
  if (annotationBytes > TOTAL_ANNOTATION_BYTES) {
    causes.push({
      reason: 'FieldValueTooLong',
      field: 'metadata.annotations',
      message: 'Too long: may not be more than 262144 bytes',
    });
  }
}

function checkPodSpec(spec: unknown, causes: Cause[]): void {
  const containers = (spec as { containers?: unknown } | undefined)?.containers;
  if (!Array.isArray(containers) || containers.length === 0) {
    causes.push({ reason: 'FieldValueRequired', field: 'spec.containers', message: 'Required value' });
    return;
  }
  const seen = new Set<string>();
  containers.forEach((container: { name?: unknown; image?: unknown }, index) => {
    const field = `spec.containers[${index}]`;
    if (typeof container.name !== 'string' || !isDnsLabel(container.name)) {
      causes.push({
        reason: 'FieldValueInvalid',
        field: `${field}.name`,
        message: `Invalid value: "${String(container.name)}": a lowercase RFC 1123 label`,
      });
    } else if (seen.has(container.name)) {
      causes.push({
        reason: 'FieldValueDuplicate',
        field: `${field}.name`,
        message: `Duplicate value: "${container.name}"`,
      });
    } else {
      seen.add(container.name);
    }
    if (typeof container.image !== 'string' || container.image.trim() === '') {
      causes.push({ reason: 'FieldValueRequired', field: `${field}.image`, message: 'Required value' });
    }
  });
}
