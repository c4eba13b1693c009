"""Exports the SpecTrain paper's CIFAR-sized models for the what-if study (docs/whatif-paper.md):
VGG-16 (CIFAR variant: the VGG-16 conv stack, then a 512 -> 10 linear head, or the original
4096-4096 classifier) and ResNet-18 at 32x32.
Usage: /usr/bin/python3 tools/bench/export_paper_models.py OUTDIR  (models are ~60 MB: never commit)"""
import os
import sys

import torch
import torch.nn as nn
import torchvision

VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16_cifar(head=(512, 10)):
    layers, c = [], 3
    for v in VGG16:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
            c = v
    fc = []
    for a, b in zip(head[:-1], head[1:]):
        fc += [nn.Linear(a, b), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers, nn.Flatten(), *fc[:-1])


def vgg16_cifar_fc4096():
    # The original VGG-16 classifier width (4096-4096) on 32x32 inputs: 33.6M parameters.
    return vgg16_cifar(head=(512, 4096, 4096, 10))


def resnet18_cifar():
    m = torchvision.models.resnet18(num_classes=10)
    m.avgpool = nn.AdaptiveAvgPool2d(1)  # exports as GlobalAveragePool at 32x32
    return m


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    for name, make in (("vgg16_cifar", vgg16_cifar), ("vgg16_cifar_fc4096", vgg16_cifar_fc4096),
                       ("resnet18_cifar", resnet18_cifar)):
        path = os.path.join(out, name + ".onnx")
        torch.onnx.export(make(), torch.zeros(2, 3, 32, 32), path, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}}, opset_version=13,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        print("wrote", path)


if __name__ == "__main__":
    main()
