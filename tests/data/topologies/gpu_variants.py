#!/usr/bin/python3
"""gpu_variants.py - the test topologies that differ from an export in their GPUs' OS
devices only (what hwloc's CUDA and NVML backends report), for test_topo and
test_weft_topo.sh:

  2socket-4gpu-1ib-nocuda.xml  2socket-4gpu-1ib.xml without its cuda0 device: no GPU
                               carries a CUDA or NVML device, so weft indexes all four in
                               PCI bus order (its fallback)
  nvidia-dgx2-8ib-job8-11.xml  nvidia-dgx2-8ib.xml as a job of 4 GPUs sees it under a
                               device cgroup (Slurm's ConstrainDevices=yes): sysfs still
                               lists all 16 GPUs, but NVML and CUDA open only the job's,
                               GPUs 8-11 (bus order, NUMA 1), so only those carry OS
                               devices, numbered from 0: nvml0..nvml3 and cuda0..cuda3

    /usr/bin/python3 tests/data/topologies/gpu_variants.py tests/data/topologies
"""
import os
import sys
import xml.etree.ElementTree as ET


def gpu_pcidevs(root):
    return [o for o in root.iter("object") if o.get("type") == "PCIDev" and
            any(k.get("type") == "OSDev" and k.get("osdev_type") == "5" for k in o)]


def main(d):
    tree = ET.parse(os.path.join(d, "2socket-4gpu-1ib.xml"))
    for pci in tree.getroot().iter("object"):
        for k in [k for k in pci if k.get("type") == "OSDev" and k.get("subtype") == "CUDA"]:
            pci.remove(k)
    tree.write(os.path.join(d, "2socket-4gpu-1ib-nocuda.xml"), xml_declaration=True,
               encoding="UTF-8")

    tree = ET.parse(os.path.join(d, "nvidia-dgx2-8ib.xml"))
    gpus = sorted(gpu_pcidevs(tree.getroot()), key=lambda o: o.get("pci_busid"))
    assert len(gpus) == 16, len(gpus)
    gp = 20000
    for i, pci in enumerate(gpus):
        nvml = [k for k in pci if k.get("type") == "OSDev" and k.get("osdev_type") == "5"]
        if not 8 <= i <= 11:
            for k in nvml:
                pci.remove(k)
            continue
        nvml[0].set("name", "nvml%d" % (i - 8))
        gp += 1
        cuda = ET.Element("object", {"type": "OSDev", "gp_index": str(gp),
                                     "name": "cuda%d" % (i - 8), "subtype": "CUDA",
                                     "osdev_type": "5"})
        for name, value in (("Backend", "CUDA"), ("GPUVendor", "NVIDIA Corporation"),
                            ("GPUModel", "Tesla V100-SXM3-32GB-H")):
            ET.SubElement(cuda, "info", {"name": name, "value": value})
        pci.insert(0, cuda)
    tree.write(os.path.join(d, "nvidia-dgx2-8ib-job8-11.xml"), xml_declaration=True,
               encoding="UTF-8")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/topologies")
