"""Builds the optional compiled kernel rocketidx._native (see rocketidx/_native.c for why it exists).

``optional=True``: where no C compiler or zlib headers are found the install still succeeds and
rocketidx runs its numpy path, which gives the same results more slowly.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("rocketidx._native", ["rocketidx/_native.c"], libraries=["z"],
                             extra_compile_args=["-O3"], optional=True)])
