"""Names of every child object, derived deterministically from the CR's name, so no state is needed to find them."""


def worker_pod(deployment: str, revision: str, replica: int, rank: int, group: str = "") -> str:
    """`<deployment>-<revision>-<replica>-<rank>`, with the worker group after the deployment when it has one (the
    implicit group's pods keep the names they had before groups existed)."""
    prefix = f"{deployment}-{group}" if group else deployment
    return f"{prefix}-{revision}-{replica}-{rank}"


def worker_hostname(deployment: str, revision: str, replica: int, rank: int, group: str = "") -> str:
    """The hostname of a multi-node replica's pod under the workers' Service: a DNS label (<= 63 characters), so a
    named group's pods leave the deployment's name out (the Service is the deployment's already)."""
    return f"{group}-{revision}-{replica}-{rank}" if group else worker_pod(deployment, revision, replica, rank)


def workers_service(deployment: str) -> str:
    """Headless Service giving rank 0 of each multi-node replica a stable DNS name."""
    return f"{deployment}-workers"


def router(deployment: str) -> str:
    """The router's Service, and its Deployment (the first of a prefill/decode fleet's two router slots)."""
    return f"{deployment}-router"


def router_b(deployment: str) -> str:
    """A prefill/decode fleet's second router slot: the next KV epoch's routers run here while the first slot's
    serve (`controller/cutover.py`), and the other way round at the next cut-over."""
    return f"{deployment}-router-b"


def router_slots(deployment: str) -> tuple[str, str]:
    """The names of the router Deployments a CR may own, the first one a colocated fleet's only one."""
    return (router(deployment), router_b(deployment))


def pod_monitor(deployment: str) -> str:
    return deployment


def dist_init_host(deployment: str, namespace: str, revision: str, replica: int, group: str = "") -> str:
    """DNS name of rank 0 of a replica: `<hostname>.<subdomain>.<namespace>.svc` through the headless Service."""
    hostname = worker_hostname(deployment, revision, replica, 0, group)
    return f"{hostname}.{workers_service(deployment)}.{namespace}.svc"


def router_endpoint(deployment: str, namespace: str, port: int) -> str:
    return f"http://{router(deployment)}.{namespace}.svc:{port}"


def network_policy(deployment: str) -> str:
    """The NetworkPolicy that admits only the fleet's routers, its other workers, the operator and Prometheus to
    its worker pods (named like the workers' Service: another kind, so no clash)."""
    return f"{deployment}-workers"


def inference_pool(deployment: str) -> str:
    """The Gateway API Inference Extension InferencePool over the fleet's registered workers."""
    return deployment
