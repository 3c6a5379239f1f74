"""gpu_backend/models"""
