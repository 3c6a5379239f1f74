"""gpu_backend/certify"""
