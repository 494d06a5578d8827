"""Consistent-region runtime: state handlers, controller, checkpoint store, in-process pipeline.

This package never imports :mod:`operators`; it reaches files only through the
:class:`region.fs.FileSystem` protocol it declares.
"""
