"""Ray in the image, decided by preflight's launch records (issue 12): a node that runs ``ray start`` (a TP x PP
multi-node group with vllm_serve_multinode_backend: ray) records ``launch.image.ray``, which the image stage's
vllm_image_ray follows; an inventory that pins vllm_image_ray: false on such a node is refused, one line per host."""

from __future__ import annotations

from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.images import check_image_ray
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import fleet_launch

from .test_launch_records import H200, MODEL_70B, _input, _network, _other_machine

TP2_PP2 = {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}


def _fleet(backend: str = "ray", **group_vars: Any) -> dict[str, dict[str, Any]]:
    """A two-node group "big" (70B, TP 2 x PP 2 over n1, n2) with ``backend``, and a single host s1."""
    hosts = {name: _input(name, _other_machine(H200, name[-1] * 4), model=MODEL_70B, ansible_host=addr,
                          vllm_fleet_multinode_group="big", network=_network(addr),
                          vllm_serve_multinode_backend=backend, vllm_fleet_engine_args=TP2_PP2, **group_vars)
             for name, addr in (("n1", "10.0.0.1"), ("n2", "10.0.0.2"))}
    hosts["s1"] = _input("s1", _other_machine(H200, "5555"), ansible_host="10.0.0.5", vllm_serve_multinode_backend=backend)
    return hosts


def test_a_ray_group_records_ray_in_its_nodes_images_only() -> None:
    result = fleet_launch(_fleet(), check_image=False)
    assert result["errors"] == [] and result["warnings"] == []
    images = {host: rec["launch"]["image"] for host, rec in result["records"].items()}
    assert images["n1"]["ray"] is True and images["n2"]["ray"] is True
    assert images["s1"]["ray"] is False  # one host with the Ray backend starts no Ray cluster
    head, worker = (result["records"][n]["launch"]["replicas"][0]["argv"] for n in ("n1", "n2"))
    assert head[:2] == ["bash", "-c"] and head[2].startswith("ray start --head")
    assert worker[:2] == ["ray", "start"]


def test_the_mp_launcher_needs_no_ray() -> None:
    result = fleet_launch(_fleet("mp"), check_image=False)
    assert result["errors"] == []
    assert not any(rec["launch"]["image"]["ray"] for rec in result["records"].values())


def test_vllm_image_ray_false_on_a_ray_node_is_refused() -> None:
    for pinned in (False, "false", "no"):
        result = fleet_launch(_fleet(vllm_image_ray=pinned), check_image=False)
        assert result["errors"] == [
            f"{host}: its multi-node group runs the Ray launcher (vllm_serve_multinode_backend: ray) but "
            "vllm_image_ray is false, so its image would have no Ray: remove vllm_image_ray (the image stage then "
            "installs the Ray of the compatibility table) or set vllm_serve_multinode_backend: mp"
            for host in ("n1", "n2")]
    # Ray pinned on, or false where no Ray runs, is fine.
    assert fleet_launch(_fleet(vllm_image_ray=True), check_image=False)["errors"] == []
    assert fleet_launch(_fleet("mp", vllm_image_ray=False), check_image=False)["errors"] == []


def test_vllm_image_ray_must_be_a_switch() -> None:
    result = fleet_launch(_fleet("mp", vllm_image_ray="sometimes"), check_image=False)
    assert result["errors"] == [f"{host}: vllm_image_ray must be true or false, got string 'sometimes'"
                                for host in ("n1", "n2")]


def test_a_pinned_image_on_a_ray_node_is_a_warning() -> None:
    result = fleet_launch(_fleet(vllm_serve_image="registry.example/vllm:custom"), check_image=False)
    assert result["errors"] == []
    assert result["warnings"] == [
        f"{host}: runs the Ray launcher on the pinned image registry.example/vllm:custom (vllm_serve_image): it must "
        "contain Ray (the `ray` command); the image stage installs Ray only into the images it builds"
        for host in ("n1", "n2")]


def test_check_image_ray_alone() -> None:
    ray = {"image": {"ray": True, "ref": None}}
    assert check_image_ray("h", ray, None) == ([], [])
    assert check_image_ray("h", ray, True) == ([], [])
    assert check_image_ray("h", {"image": {"ray": False}}, False) == ([], [])
    assert check_image_ray("h", {}, None) == ([], [])  # a record from before Ray was recorded
    errors, _warnings = check_image_ray("h", ray, False)
    assert len(errors) == 1 and errors[0].startswith("h: ")
