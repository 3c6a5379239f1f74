"""gpu_backend/engine"""
