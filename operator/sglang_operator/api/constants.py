"""Names of the API and of the labels/annotations the operator owns, in one place.

Every module that needs the group, the plural or a label key imports it from here, so renaming one is one edit.
"""

from typing import Final

GROUP: Final = "sglang.ai"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "SGLangDeployment"
LIST_KIND: Final = "SGLangDeploymentList"
PLURAL: Final = "sglangdeployments"
SINGULAR: Final = "sglangdeployment"
SHORT_NAMES: Final = ("sgld",)
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# Labels on every child. `deployment` ties a child to its CR, `component` says what it is.
LABEL_DEPLOYMENT: Final = f"{GROUP}/deployment"
LABEL_COMPONENT: Final = f"{GROUP}/component"
LABEL_REPLICA: Final = f"{GROUP}/replica"
LABEL_NODE_RANK: Final = f"{GROUP}/node-rank"
LABEL_REVISION: Final = f"{GROUP}/revision"
LABEL_WORKER_GROUP: Final = f"{GROUP}/group"
# A prefill/decode fleet's worker and router pods carry their KV epoch (`kvepoch.py`); its router Deployments and
# Service carry it as an annotation too (the watch caches keep annotations of the operator's own, not labels).
LABEL_KV_EPOCH: Final = f"{GROUP}/kv-epoch"
ANNOTATION_KV_EPOCH: Final = LABEL_KV_EPOCH
# On the router Service: when its selector moved to the serving epoch (the old generation drains after a settle time).
ANNOTATION_KV_EPOCH_SINCE: Final = f"{GROUP}/kv-epoch-since"
LABEL_APP_NAME: Final = "app.kubernetes.io/name"
LABEL_APP_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_APP_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_APP_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_APP_PART_OF: Final = "app.kubernetes.io/part-of"

COMPONENT_WORKER: Final = "worker"
COMPONENT_ROUTER: Final = "router"
MANAGED_BY: Final = "sglang-operator"

# Annotations the operator writes on worker pods to keep drain state in the cluster, not in memory.
ANNOTATION_DRAINING: Final = f"{GROUP}/draining-since"
ANNOTATION_WARM: Final = f"{GROUP}/warm"
# Pods of one replica record how many nodes the replica spans, so a missing rank is noticed for old revisions too.
ANNOTATION_REPLICA_NODES: Final = f"{GROUP}/replica-nodes"
# Children other than pods carry the hash of their rendered form; a differing hash is the only reason to patch.
ANNOTATION_SPEC_HASH: Final = f"{GROUP}/spec-hash"
# Annotations read by the local Prometheus' kubernetes_sd relabelling (and many real clusters).
ANNOTATION_SCRAPE: Final = "prometheus.io/scrape"
ANNOTATION_SCRAPE_PORT: Final = "prometheus.io/port"
ANNOTATION_SCRAPE_PATH: Final = "prometheus.io/path"

# Defaults that track the SGLang release of the default image.
DEFAULT_SGLANG_VERSION: Final = "0.5.23"
DEFAULT_SGLANG_IMAGE: Final = f"lmsysorg/sglang:v{DEFAULT_SGLANG_VERSION}"
DEFAULT_ROUTER_IMAGE: Final = "lightseekorg/smg:1.13.0"
DEFAULT_ENGINE_PORT: Final = 30000
DEFAULT_ROUTER_PORT: Final = 30000
DEFAULT_ROUTER_METRICS_PORT: Final = 29000
DIST_INIT_PORT: Final = 20000
