#!/usr/bin/python3
"""dgx2_add_hcas.py - nvidia-dgx2-8ib.xml from nvidia-dgx2.xml: one ConnectX-6 HCA beside
each pair of GPUs, on the pair's own (lower) PCIe switch, as a DGX-2 has them. The export
this repository carries shows no HCA; the switches nest (root port, upper switch, a lower
switch per GPU pair), which is what test_topo checks NIC choice against.

    /usr/bin/python3 tests/data/topologies/dgx2_add_hcas.py SRC.xml DST.xml
"""
import sys
import xml.etree.ElementTree as ET


def main(src, dst):
    tree = ET.parse(src)
    next_gp = [10000]

    def gp():
        next_gp[0] += 1
        return str(next_gp[0])

    # a lower switch: a bridge at depth 4 whose children are two bridges (one GPU each)
    lower = [b for b in tree.getroot().iter("object")
             if b.get("type") == "Bridge" and b.get("depth") == "4" and
             sum(k.get("type") == "Bridge" for k in b) == 2]
    for i, sw in enumerate(lower):
        first, last = sw.get("bridge_pci").split("[")[1].rstrip("]").split("-")
        bus = "%02x" % (int(last, 16) - 1)          # a bus of the switch's range, unused
        port = ET.Element("object", {
            "type": "Bridge", "gp_index": gp(), "bridge_type": "1-1", "depth": "5",
            "bridge_pci": "0000:[%s-%s]" % (bus, bus),
            "pci_busid": "0000:%02x:08.0" % int(first, 16),
            "pci_type": "0604 [10b5:9781] [10b5:9781] b0", "pci_link_speed": "15.75"})
        hca = ET.SubElement(port, "object", {
            "type": "PCIDev", "gp_index": gp(), "pci_busid": "0000:%s:00.0" % bus,
            "pci_type": "0207 [15b3:101b] [15b3:0007] 00", "pci_link_speed": "15.75"})
        ET.SubElement(hca, "info", {"name": "PCIVendor", "value": "Mellanox Technologies"})
        ET.SubElement(hca, "info", {"name": "PCIDevice", "value": "MT28908 Family [ConnectX-6]"})
        ET.SubElement(hca, "object", {"type": "OSDev", "gp_index": gp(), "name": "ib%d" % i,
                                      "osdev_type": "2"})
        ET.SubElement(hca, "object", {"type": "OSDev", "gp_index": gp(),
                                      "name": "mlx5_%d" % i, "osdev_type": "3"})
        bridges = [k for k in sw if k.get("type") == "Bridge"]
        sw.insert(list(sw).index(bridges[1]), port)   # between the GPUs, in bus order
    tree.write(dst, xml_declaration=True, encoding="UTF-8")
    print("%s: %d HCAs added" % (dst, len(lower)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
